"""The NVML backend's mapping code against a stand-in ``pynvml`` module (no GPU in CI).

This only proves the translation (host numbering by minor number, NOT_SUPPORTED read as
empty, error names and which errors count as hardware faults, throttle bits, kernel-log
Xids mapped to GPUs by PCI address). The real driver path is exercised by
tests/gpu/test_real_nvml.py (``pytest -m gpu``) on a GPU node.
"""

from __future__ import annotations

import sys
import types

import pytest

from slurmkit.health.backends import BackendError, BackendUnavailable


class _Err(Exception):
    def __init__(self, value):
        super().__init__(f"nvml error {value}")
        self.value = value


def fake_pynvml(lost_gpu=None, init_error=None):
    m = types.ModuleType("pynvml")
    m.NVMLError = _Err
    m.NVML_ERROR_NOT_SUPPORTED, m.NVML_ERROR_GPU_IS_LOST, m.NVML_ERROR_INVALID_ARGUMENT = 3, 15, 2
    m.NVML_ERROR_LIBRARY_NOT_FOUND = 12
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_MEMORY_ERROR_TYPE_CORRECTED, m.NVML_VOLATILE_ECC = 1, 0, 0
    (
        m.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        m.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    ) = 0, 1
    m.NVML_TEMPERATURE_GPU, m.NVML_FEATURE_ENABLED, m.NVML_NVLINK_MAX_LINKS = 0, 1, 18
    m.nvmlMemory_v2 = 0x2000028
    # NVML order (PCI) differs from minor numbers: NVML index 0 is /dev/nvidia1
    devs = [
        {"minor": 1, "bus": "00000000:9A:00.0", "unc": 0, "links": 18},
        {"minor": 0, "bus": "00000000:18:00.0", "unc": 4, "links": 0},
    ]

    def init():
        if init_error:
            raise _Err(init_error)

    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(devs)
    m.nvmlDeviceGetHandleByIndex = lambda i: devs[i]
    m.nvmlDeviceGetMinorNumber = lambda h: h["minor"]
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h['minor']}"
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=h["bus"].encode())
    m.nvmlDeviceGetMemoryInfo = lambda h, version=None: types.SimpleNamespace(
        total=81559 * 2**20, used=3 * 2**20
    )

    def ecc(h, kind, counter):
        if h["minor"] == lost_gpu:
            raise _Err(15)
        return h["unc"] if kind == 1 else 7

    m.nvmlDeviceGetTotalEccErrors = ecc

    def not_supported(*a):
        raise _Err(3)

    m.nvmlDeviceGetRetiredPages = not_supported
    m.nvmlDeviceGetRetiredPagesPendingStatus = not_supported
    m.nvmlDeviceGetRemappedRows = lambda h: (0, 0, h["minor"] == 1, False)
    m.nvmlDeviceGetTemperature = lambda h, s: 41
    m.nvmlDeviceGetPowerUsage = lambda h: 123456
    m.nvmlDeviceGetPersistenceMode = lambda h: 1
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x1 | 0x40

    def link_state(h, link):
        if h["links"] == 0:
            raise _Err(3)
        if link >= h["links"]:
            raise _Err(2)
        return 0 if link == 5 else 1

    m.nvmlDeviceGetNvLinkState = link_state
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=4242, usedGpuMemory=2**30)]
    return m


@pytest.fixture
def nvml(monkeypatch):
    def install(**kw):
        monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(**kw))
        from slurmkit.health.backends.nvml import NvmlBackend

        return NvmlBackend()

    return install


def test_host_numbering_and_reads(nvml):
    b = nvml()
    assert [(g.index, g.pci_bus_id) for g in b.gpus()] == [(0, "00000000:18:00.0"), (1, "00000000:9A:00.0")]
    assert b.ecc(0) == {"volatile_uncorrected": 4, "volatile_corrected": 7}
    assert b.retired_pages(0) == {}  # NOT_SUPPORTED (Hopper): empty, not an error
    assert b.remapped_rows(1)["pending"] is True
    assert b.power(0) == pytest.approx(123.456)
    assert b.throttle(0) == ["gpu_idle", "hw_thermal_slowdown"]
    assert b.nvlink(0) == [] and len(b.nvlink(1)) == 18 and b.nvlink(1)[5] is False
    assert b.processes(0)[0].pid == 4242 and b.processes(0)[0].used_mib == 1024
    assert b.memory_used_mib(0) == 3


def test_gpu_lost_is_a_hardware_error(nvml):
    b = nvml(lost_gpu=1)
    with pytest.raises(BackendError) as exc:
        b.ecc(1)
    assert exc.value.hardware and exc.value.code == "NVML_GPU_IS_LOST" and exc.value.gpu == 1


def test_library_missing_is_unavailable_not_hardware(nvml):
    with pytest.raises(BackendUnavailable) as exc:
        nvml(init_error=12)
    assert not exc.value.hardware and exc.value.code == "NVML_LIBRARY_NOT_FOUND"


def test_xids_from_the_kernel_log_map_to_minor_numbers(nvml, monkeypatch):
    from slurmkit.health.checks import kmsg

    b = nvml()
    monkeypatch.setattr(
        kmsg,
        "read_kmsg_records",
        lambda: [
            "6,1,2000000,-;NVRM: Xid (PCI:0000:9a:00): 79, pid=1, name=python, GPU has fallen off the bus."
        ],
    )
    monkeypatch.setattr(kmsg, "boot_time", lambda: 1000.0)
    ev = b.xid_events(0.0)
    assert [(e.xid, e.gpu, e.timestamp) for e in ev] == [(79, 1, 1002.0)]
    assert b.xid_events(1002.0) == []
