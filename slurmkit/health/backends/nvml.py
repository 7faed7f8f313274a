"""The real GPU backend: nvidia-ml-py (``import pynvml``), imported when first used.

Every method maps one NVML query; NVML errors become :class:`BackendError` with the
NVML error name, marked ``hardware`` when the error itself means the GPU is in
trouble (GPU_IS_LOST, RESET_REQUIRED, ...). Features a GPU does not have
(NOT_SUPPORTED: page retirement on Hopper, NVLink on PCIe cards) read as empty.

GPUs are indexed by their minor number (``/dev/nvidiaN``), Slurm's host numbering,
which need not match NVML's PCI-ordered index.
"""

from __future__ import annotations

from typing import Any, Dict, List

from slurmkit.health.backends import (
    HARDWARE_ERRORS,
    AccountingStats,
    BackendError,
    BackendUnavailable,
    GpuBackend,
    GpuInfo,
    GpuProcess,
    XidEvent,
    throttle_names,
)

MIB = 1024 * 1024
#: NVML_VALUE_NOT_AVAILABLE for unsigned int and unsigned long long fields (nvml.h).
_NA_UINT = 0xFFFFFFFF
_NA_ULL = 0xFFFFFFFFFFFFFFFF


def _available(value: Any, na: int) -> Any:
    value = getattr(value, "value", value)  # pynvml may hand back ctypes numbers
    if value is None or int(value) >= na:
        return None
    return int(value)


def _error_name(exc: Exception) -> str:
    import pynvml

    value = getattr(exc, "value", None)
    for attr in dir(pynvml):
        if attr.startswith("NVML_ERROR_") and getattr(pynvml, attr) == value:
            return attr[len("NVML_ERROR_") :]
    return str(exc).upper().replace(" ", "_") or "UNKNOWN"


class NvmlBackend(GpuBackend):
    name = "nvml"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise BackendUnavailable(
                "nvidia-ml-py is not installed (pip install 'slurmkit[gpu]')", code="NO_NVML"
            ) from None
        self.nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            name = _error_name(exc)
            raise BackendUnavailable(
                f"NVML init failed: NVML_ERROR_{name}", code=f"NVML_{name}", hardware=name in HARDWARE_ERRORS
            ) from None
        self._handles: Dict[int, Any] = {}
        self._info: List[GpuInfo] = []
        try:
            count = pynvml.nvmlDeviceGetCount()
            for nvml_index in range(count):
                h = pynvml.nvmlDeviceGetHandleByIndex(nvml_index)
                try:
                    minor = pynvml.nvmlDeviceGetMinorNumber(h)
                except pynvml.NVMLError:
                    minor = nvml_index
                name = pynvml.nvmlDeviceGetName(h)
                name = name.decode() if isinstance(name, bytes) else name
                uuid = pynvml.nvmlDeviceGetUUID(h)
                uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
                pci = pynvml.nvmlDeviceGetPciInfo(h).busId
                pci = pci.decode() if isinstance(pci, bytes) else pci
                total = pynvml.nvmlDeviceGetMemoryInfo(h).total / MIB
                self._handles[minor] = h
                self._info.append(
                    GpuInfo(index=minor, name=name, uuid=uuid, pci_bus_id=pci, memory_total_mib=total)
                )
        except pynvml.NVMLError as exc:
            name = _error_name(exc)
            raise BackendError(
                f"NVML enumeration failed: NVML_ERROR_{name}",
                code=f"NVML_{name}",
                hardware=name in HARDWARE_ERRORS,
            ) from None
        self._info.sort(key=lambda g: g.index)

    def _call(self, what: str, index: int, fn, *args):
        nv = self.nv
        try:
            h = self._handles[index]
        except KeyError:
            raise BackendError(
                f"no GPU with minor number {index}", code="NVML_INVALID_ARGUMENT", gpu=index
            ) from None
        try:
            return fn(h, *args)
        except nv.NVMLError as exc:
            name = _error_name(exc)
            if name == "NOT_SUPPORTED":
                raise _NotSupported() from None
            raise BackendError(
                f"NVML_ERROR_{name} in {what} on GPU {index}",
                code=f"NVML_{name}",
                hardware=name in HARDWARE_ERRORS,
                gpu=index,
            ) from None

    def gpus(self) -> List[GpuInfo]:
        return list(self._info)

    def ecc(self, index: int) -> Dict[str, int]:
        nv = self.nv
        try:
            unc = self._call(
                "ecc",
                index,
                nv.nvmlDeviceGetTotalEccErrors,
                nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nv.NVML_VOLATILE_ECC,
            )
            cor = self._call(
                "ecc",
                index,
                nv.nvmlDeviceGetTotalEccErrors,
                nv.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                nv.NVML_VOLATILE_ECC,
            )
        except _NotSupported:
            return {}
        return {"volatile_uncorrected": int(unc), "volatile_corrected": int(cor)}

    def retired_pages(self, index: int) -> Dict[str, Any]:
        nv = self.nv
        try:
            sbe = self._call(
                "retired_pages",
                index,
                nv.nvmlDeviceGetRetiredPages,
                nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            )
            dbe = self._call(
                "retired_pages",
                index,
                nv.nvmlDeviceGetRetiredPages,
                nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
            )
            pending = self._call("retired_pages", index, nv.nvmlDeviceGetRetiredPagesPendingStatus)
        except _NotSupported:
            return {}
        return {"single_bit": len(sbe), "double_bit": len(dbe), "pending": bool(pending)}

    def remapped_rows(self, index: int) -> Dict[str, Any]:
        try:
            corr, unc, pending, failed = self._call("remapped_rows", index, self.nv.nvmlDeviceGetRemappedRows)
        except _NotSupported:
            return {}
        return {
            "correctable": int(corr),
            "uncorrectable": int(unc),
            "pending": bool(pending),
            "failed": bool(failed),
        }

    def temperature(self, index: int) -> float:
        return float(
            self._call("temperature", index, self.nv.nvmlDeviceGetTemperature, self.nv.NVML_TEMPERATURE_GPU)
        )

    def power(self, index: int) -> float:
        return self._call("power", index, self.nv.nvmlDeviceGetPowerUsage) / 1000.0

    def persistence(self, index: int) -> bool:
        return (
            self._call("persistence", index, self.nv.nvmlDeviceGetPersistenceMode)
            == self.nv.NVML_FEATURE_ENABLED
        )

    def throttle(self, index: int) -> List[str]:
        nv = self.nv
        fn = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        try:
            return throttle_names(int(self._call("throttle", index, fn)))
        except _NotSupported:
            return []

    def nvlink(self, index: int) -> List[bool]:
        nv = self.nv
        states = []
        for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                states.append(
                    self._call("nvlink", index, nv.nvmlDeviceGetNvLinkState, link) == nv.NVML_FEATURE_ENABLED
                )
            except _NotSupported:
                break
            except BackendError as exc:
                if exc.code in ("NVML_INVALID_ARGUMENT",):  # past the last link of this GPU
                    break
                raise
        return states

    def processes(self, index: int) -> List[GpuProcess]:
        try:
            procs = self._call("processes", index, self.nv.nvmlDeviceGetComputeRunningProcesses)
        except _NotSupported:
            return []
        return [GpuProcess(pid=int(p.pid), used_mib=(p.usedGpuMemory or 0) / MIB) for p in procs]

    def memory_used_mib(self, index: int) -> float:
        nv = self.nv
        try:  # v2 reports reserved memory separately, so "used" is what processes hold
            info = self._call("memory", index, nv.nvmlDeviceGetMemoryInfo, nv.nvmlMemory_v2)
        except (TypeError, AttributeError, BackendError, _NotSupported):
            info = self._call("memory", index, nv.nvmlDeviceGetMemoryInfo)
        return info.used / MIB

    def xid_events(self, since: float) -> List[XidEvent]:
        from slurmkit.health.checks import kmsg

        bus_to_index = {kmsg.short_pci(g.pci_bus_id): g.index for g in self._info if g.pci_bus_id}
        out = []
        for ts, pci, xid, rest in kmsg.xid_records(kmsg.read_kmsg_records(), kmsg.boot_time()):
            if ts > since:
                out.append(XidEvent(xid=xid, timestamp=ts, gpu=bus_to_index.get(pci), pci=pci, message=rest))
        return out

    # ------------------------------------------------------------------ accounting

    def accounting_mode(self, index: int):
        try:
            mode = self._call("accounting_mode", index, self.nv.nvmlDeviceGetAccountingMode)
        except _NotSupported:
            return None
        return mode == self.nv.NVML_FEATURE_ENABLED

    def set_accounting_mode(self, index: int, enabled: bool) -> None:
        nv = self.nv
        flag = nv.NVML_FEATURE_ENABLED if enabled else nv.NVML_FEATURE_DISABLED
        try:
            self._call("set_accounting_mode", index, nv.nvmlDeviceSetAccountingMode, flag)
        except _NotSupported:
            raise BackendError(
                f"GPU {index} has no accounting mode", code="NVML_NOT_SUPPORTED", gpu=index
            ) from None

    def accounting_pids(self, index: int) -> List[int]:
        try:
            pids = self._call("accounting_pids", index, self.nv.nvmlDeviceGetAccountingPids)
        except _NotSupported:
            return []
        return [int(p) for p in pids]

    def accounting_stats(self, index: int, pid: int):
        try:
            st = self._call("accounting_stats", index, self.nv.nvmlDeviceGetAccountingStats, pid)
        except _NotSupported:
            return None
        except BackendError as exc:
            if exc.code == "NVML_NOT_FOUND":  # the circular buffer dropped it
                return None
            raise
        util = _available(st.gpuUtilization, _NA_UINT)
        mem_util = _available(st.memoryUtilization, _NA_UINT)
        max_mem = _available(st.maxMemoryUsage, _NA_ULL)
        time_ms = _available(st.time, _NA_ULL)
        start_us = _available(st.startTime, _NA_ULL)
        running = bool(_available(st.isRunning, _NA_UINT))
        return AccountingStats(
            pid=int(pid),
            gpu_util=None if util is None else float(util),
            mem_util=None if mem_util is None else float(mem_util),
            max_memory_mib=None if max_mem is None else max_mem / MIB,
            time_s=None if time_ms is None else time_ms / 1000.0,
            start_time=None if start_us is None else start_us / 1e6,
            running=running,
        )

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass


class _NotSupported(Exception):
    """NVML_ERROR_NOT_SUPPORTED: the GPU has no such feature."""
