"""GPU backends: one module per external interface, one small interface for the checks.

* :mod:`.nvml` talks to the driver through nvidia-ml-py (imported lazily) and reads
  Xid events from the kernel log (``/dev/kmsg``), because NVML only delivers events
  that happen while a process is subscribed, and a prolog lives for a second.
* :mod:`.simulated` reads a YAML fixture per node (``health.simulated_fixture`` with a
  ``{node}`` placeholder), so tests, the devcluster and GPU-less machines run every
  check for real against it, including injected hangs and NVML errors.

Checks only see :class:`GpuBackend`. GPU indices are *host numbering*: the minor
number of ``/dev/nvidiaN``, which is what Slurm puts in ``SLURM_JOB_GPUS`` and
``CUDA_VISIBLE_DEVICES`` in the prolog and epilog.
"""

from __future__ import annotations

from slurmkit.values import Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional


class GpuInfo(Value):
    index: int  # host numbering (device minor number)
    name: str  # NVML name, e.g. "NVIDIA H100 80GB HBM3"
    uuid: str
    pci_bus_id: str  # "00000000:18:00.0"
    memory_total_mib: float
    serial: str

    def __init__(
        self,
        index: int,
        name: str,
        uuid: str = "",
        pci_bus_id: str = "",
        memory_total_mib: float = 0.0,
        serial: str = "",
    ) -> None:
        self.index = index
        self.name = name
        self.uuid = uuid
        self.pci_bus_id = pci_bus_id
        self.memory_total_mib = memory_total_mib
        self.serial = serial


class XidEvent(Value):
    xid: int
    timestamp: float  # wall clock, seconds since the epoch
    gpu: Optional[int]  # host index when the PCI address maps to a GPU
    pci: str
    message: str

    def __init__(
        self, xid: int, timestamp: float, gpu: Optional[int] = None, pci: str = "", message: str = ""
    ) -> None:
        self.xid = xid
        self.timestamp = timestamp
        self.gpu = gpu
        self.pci = pci
        self.message = message

    def to_dict(self) -> Dict[str, Any]:
        return {
            "xid": self.xid,
            "timestamp": self.timestamp,
            "gpu": self.gpu,
            "pci": self.pci,
            "message": self.message,
        }


class GpuProcess(Value):
    pid: int
    used_mib: float
    name: str
    extra: Dict[str, Any]

    def __init__(
        self, pid: int, used_mib: float = 0.0, name: str = "", extra: Optional[Dict[str, Any]] = None
    ) -> None:
        self.pid = pid
        self.used_mib = used_mib
        self.name = name
        self.extra = {} if extra is None else extra


class AccountingStats(Value):
    """NVML per-process accounting for one pid on one GPU (``nvmlAccountingStats_t``).

    Fields NVML reports as ``NVML_VALUE_NOT_AVAILABLE`` are ``None``. ``time_s`` is how
    long the compute context was active (NVML reports 0 while the process runs);
    ``gpu_util`` the percent of that time a kernel was running; ``start_time`` epoch
    seconds.
    """

    pid: int
    gpu_util: Optional[float]
    mem_util: Optional[float]
    max_memory_mib: Optional[float]
    time_s: Optional[float]
    start_time: Optional[float]
    running: bool

    def __init__(
        self,
        pid: int,
        gpu_util: Optional[float] = None,
        mem_util: Optional[float] = None,
        max_memory_mib: Optional[float] = None,
        time_s: Optional[float] = None,
        start_time: Optional[float] = None,
        running: bool = False,
    ) -> None:
        self.pid = pid
        self.gpu_util = gpu_util
        self.mem_util = mem_util
        self.max_memory_mib = max_memory_mib
        self.time_s = time_s
        self.start_time = start_time
        self.running = running

    def to_dict(self) -> Dict[str, Any]:
        return {
            "pid": self.pid,
            "gpu_util": self.gpu_util,
            "mem_util": self.mem_util,
            "max_memory_mib": self.max_memory_mib,
            "time_s": self.time_s,
            "start_time": self.start_time,
            "running": self.running,
        }


class BackendError(Exception):
    """A backend call failed.

    ``hardware`` says whether the error itself is evidence of a GPU fault (NVML's
    GPU_IS_LOST, a GPU that needs a reset): such errors fail the check. Other errors
    (library missing, driver not loaded, a bad fixture) are slurmkit's or the site's
    problem and make the check UNKNOWN, which the gate treats as fail-open.
    """

    def __init__(
        self, message: str, *, code: str = "BACKEND_ERROR", hardware: bool = False, gpu: Optional[int] = None
    ):
        super().__init__(message)
        self.code = code
        self.hardware = hardware
        self.gpu = gpu


class BackendUnavailable(BackendError):
    """No GPU backend can run here (no nvidia-ml-py, no driver, no fixture)."""


#: NVML error names that mean the GPU itself is in trouble.
HARDWARE_ERRORS = frozenset(
    {"GPU_IS_LOST", "RESET_REQUIRED", "GPU_NOT_FOUND", "MEMORY", "CORRUPTED_INFOROM", "IRQ_ISSUE"}
)

#: Bits of nvmlClocksEventReasons (nvml.h), in the names the fixture and config use.
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def throttle_names(mask: int) -> List[str]:
    return [name for bit, name in sorted(THROTTLE_BITS.items()) if mask & bit]


class GpuBackend:
    """What every check may ask a backend. All methods may raise :class:`BackendError`."""

    name = "abstract"

    def gpus(self) -> List[GpuInfo]:
        raise NotImplementedError

    def ecc(self, index: int) -> Dict[str, int]:
        """``{"volatile_uncorrected": n, "volatile_corrected": n}``; ``{}`` if ECC is off."""
        raise NotImplementedError

    def retired_pages(self, index: int) -> Dict[str, Any]:
        """``{"single_bit": n, "double_bit": n, "pending": bool}``; ``{}`` if unsupported."""
        raise NotImplementedError

    def remapped_rows(self, index: int) -> Dict[str, Any]:
        """``{"correctable": n, "uncorrectable": n, "pending": bool, "failed": bool}``;
        ``{}`` if unsupported."""
        raise NotImplementedError

    def temperature(self, index: int) -> float:
        raise NotImplementedError

    def power(self, index: int) -> float:
        """Current draw in watts."""
        raise NotImplementedError

    def persistence(self, index: int) -> bool:
        raise NotImplementedError

    def throttle(self, index: int) -> List[str]:
        """Active clock-event (throttle) reasons, named as in :data:`THROTTLE_BITS`."""
        raise NotImplementedError

    def nvlink(self, index: int) -> List[bool]:
        """Per-link active state; an empty list for a GPU without NVLink."""
        raise NotImplementedError

    def processes(self, index: int) -> List[GpuProcess]:
        raise NotImplementedError

    def memory_used_mib(self, index: int) -> float:
        raise NotImplementedError

    def xid_events(self, since: float) -> List[XidEvent]:
        """Xid events with ``timestamp > since``."""
        raise NotImplementedError

    def accounting_mode(self, index: int) -> Optional[bool]:
        """Whether NVML per-process accounting is on for this GPU; ``None``: the GPU has none."""
        raise NotImplementedError

    def set_accounting_mode(self, index: int, enabled: bool) -> None:
        """Turn accounting on or off (root only; the driver forgets it when it unloads)."""
        raise NotImplementedError

    def accounting_pids(self, index: int) -> List[int]:
        """Pids in the GPU's accounting buffer (running and terminated processes)."""
        raise NotImplementedError

    def accounting_stats(self, index: int, pid: int) -> Optional[AccountingStats]:
        """Accounting of ``pid`` on this GPU; ``None`` when the buffer no longer holds it."""
        raise NotImplementedError

    def nvlink_bandwidth_matrix(self) -> Optional[List[List[float]]]:
        """A measured N x N matrix when the backend has one without running CUDA (the
        simulated fixture); ``None`` means: measure it with CUDA copies."""
        return None

    def heavy_value(self, name: str) -> Any:
        """A heavy probe's result provided by the backend (simulated fixture), else ``None``."""
        return None

    def close(self) -> None:
        pass


def open_backend(health_cfg: Dict[str, Any], node: str) -> GpuBackend:
    """The backend the site config asks for.

    ``auto`` is nvml when nvidia-ml-py imports and the driver answers; otherwise
    :class:`BackendUnavailable`, which makes the GPU checks UNKNOWN (fail-open).
    """
    kind = health_cfg.get("backend", "auto")
    if kind == "simulated":
        from slurmkit.health.backends.simulated import SimulatedBackend

        template = health_cfg.get("simulated_fixture")
        if not template:
            raise BackendUnavailable(
                "health.backend is simulated but health.simulated_fixture is not set", code="CONFIG"
            )
        return SimulatedBackend(template.replace("{node}", node))
    from slurmkit.health.backends.nvml import NvmlBackend

    return NvmlBackend()
