"""The simulated GPU backend: one YAML fixture per node.

It exists so that tests, the devcluster and GPU-less machines run every check for
real, against numbers someone chose, through the same code the NVML backend feeds.
The format is documented in docs/health.md ("Fixture format"); the shortest valid
fixture is ``gpus: [{model: H100}]``.

Two things make it more than a static file:

* processes are tied to real pids on this machine: a listed process whose pid no
  longer exists is gone (its memory is freed), so the epilog and the leak killer can
  kill it and watch the memory come back;
* ``inject`` makes a call hang (``hang: {call: ecc, seconds: 30}``) or raise an NVML
  error (``nvml_error: {call: temperature, error: GPU_IS_LOST, gpu: 2}``), to prove
  the deadlines and the error paths;
* ``accounting_mode`` and ``accounting`` per GPU model NVML's per-process
  accounting (mode off by default, as on a real GPU; a list of per-pid stats);
* ``scoped`` patches apply only in a process whose environment carries
  ``SLURM_JOB_ID`` (or ``SLURMKIT_SIM_SCOPE``) equal to the patch's ``scope``: a fault
  seen by one test job's prolog and epilog, and by a re-check run with
  ``SLURMKIT_SIM_SCOPE`` set, but not by the other jobs of a devcluster that other
  tests share.

The file is read once per process (the prolog is a fresh process per job).
"""

from __future__ import annotations

import os
import time

from slurmkit.core.cache import load_derived
from slurmkit.core.trust import UntrustedFile
from slurmkit.errors import ConfigError
from slurmkit.health.backends import (
    HARDWARE_ERRORS,
    AccountingStats,
    BackendError,
    BackendUnavailable,
    GpuBackend,
    GpuInfo,
    GpuProcess,
    XidEvent,
)
from slurmkit.slurm.jobenv import JobEnv

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

#: Memory totals (MiB) by model when a fixture leaves it out.
MODEL_MEMORY_MIB = {"H100": 81559, "H200": 143771, "B100": 196608, "A100": 81920}
MODEL_NAMES = {
    "H100": "NVIDIA H100 80GB HBM3",
    "H200": "NVIDIA H200",
    "B100": "NVIDIA B100",
    "A100": "NVIDIA A100-SXM4-80GB",
}


def _parse_fixture(content: bytes, path: str) -> Any:
    try:
        from slurmkit.core.yamlload import load_yaml_text  # only when the fixture changed

        return load_yaml_text(content.decode("utf-8"), path)
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", path=path) from None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie has exited: its memory is gone even if the pid is not reaped yet
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return stat[stat.rfind(b")") + 2 :][:1] != b"Z"
    except OSError:
        return False


class SimulatedBackend(GpuBackend):
    name = "simulated"

    def __init__(self, path: str):
        self.path = path
        try:
            # root reads it in the prolog: the one trust rule, errors that name the line, and
            # the parsed fixture cached like the config (no YAML while the file is unchanged)
            data = load_derived(path, "gpu-fixture", lambda content: _parse_fixture(content, path))
        except FileNotFoundError:
            raise BackendUnavailable(f"simulated GPU fixture not found: {path}", code="FIXTURE") from None
        except UntrustedFile as exc:
            raise BackendUnavailable(
                f"simulated GPU fixture {path} not trusted: {exc.why}", code="FIXTURE"
            ) from None
        except ConfigError as exc:
            raise BackendUnavailable(f"invalid simulated GPU fixture: {exc}", code="FIXTURE") from None
        except OSError as exc:
            raise BackendUnavailable(
                f"cannot read simulated GPU fixture {path}: {exc.strerror}", code="FIXTURE"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("gpus", []), list):
            raise BackendUnavailable(f"{path}: expected a mapping with a 'gpus' list", code="FIXTURE")
        self.data = data = _apply_scoped(data, os.environ)
        defaults = data.get("defaults") or {}
        self._gpus: List[Dict[str, Any]] = []
        for pos, raw in enumerate(data.get("gpus") or []):
            if not isinstance(raw, dict):
                raise BackendUnavailable(f"{path}: gpus[{pos}] must be a mapping", code="FIXTURE")
            gpu = _merge(defaults, raw)
            gpu.setdefault("index", pos)
            self._gpus.append(gpu)
        self._by_index = {int(g["index"]): g for g in self._gpus}
        self._accounting_override: Dict[int, bool] = {}
        self._inject("init", None)

    # ------------------------------------------------------------------ injection

    def _inject(self, call: str, index: Optional[int]) -> None:
        inject = self.data.get("inject") or {}
        for hang in _as_list(inject.get("hang")):
            if hang.get("call", "any") in (call, "any") and hang.get("gpu") in (None, index):
                time.sleep(float(hang.get("seconds", 60)))
        for err in _as_list(inject.get("nvml_error")):
            if err.get("call", "any") in (call, "any") and err.get("gpu") in (None, index):
                name = str(err.get("error", "UNKNOWN")).upper().replace("NVML_ERROR_", "")
                raise BackendError(
                    f"NVML_ERROR_{name} in {call}" + (f" on GPU {index}" if index is not None else ""),
                    code=f"NVML_{name}",
                    hardware=name in HARDWARE_ERRORS,
                    gpu=index,
                )

    def _gpu(self, call: str, index: int) -> Dict[str, Any]:
        self._inject(call, index)
        try:
            return self._by_index[index]
        except KeyError:
            raise BackendError(
                f"no GPU with index {index} in {self.path}", code="NVML_INVALID_ARGUMENT", gpu=index
            ) from None

    # ------------------------------------------------------------------ interface

    def gpus(self) -> List[GpuInfo]:
        self._inject("gpus", None)
        out = []
        for g in self._gpus:
            model = str(g.get("model", "H100"))
            out.append(
                GpuInfo(
                    index=int(g["index"]),
                    name=str(g.get("name") or MODEL_NAMES.get(model.upper(), f"NVIDIA {model}")),
                    uuid=str(g.get("uuid", f"GPU-sim-{g['index']}")),
                    pci_bus_id=str(g.get("pci_bus_id", "")),
                    memory_total_mib=float(
                        g.get("memory_total_mib") or MODEL_MEMORY_MIB.get(model.upper(), 81559)
                    ),
                    serial=str(g.get("serial", "")),
                )
            )
        return out

    def ecc(self, index: int) -> Dict[str, int]:
        g = self._gpu("ecc", index)
        if g.get("ecc_enabled", True) is False:
            return {}
        ecc = g.get("ecc") or {}
        return {
            "volatile_uncorrected": int(ecc.get("volatile_uncorrected", 0)),
            "volatile_corrected": int(ecc.get("volatile_corrected", 0)),
        }

    def retired_pages(self, index: int) -> Dict[str, Any]:
        rp = self._gpu("retired_pages", index).get("retired_pages")
        if rp is None:
            return {"single_bit": 0, "double_bit": 0, "pending": False}
        if rp == "unsupported":
            return {}
        return {
            "single_bit": int(rp.get("single_bit", 0)),
            "double_bit": int(rp.get("double_bit", 0)),
            "pending": bool(rp.get("pending", False)),
        }

    def remapped_rows(self, index: int) -> Dict[str, Any]:
        rr = self._gpu("remapped_rows", index).get("remapped_rows")
        if rr is None:
            return {"correctable": 0, "uncorrectable": 0, "pending": False, "failed": False}
        if rr == "unsupported":
            return {}
        return {
            "correctable": int(rr.get("correctable", 0)),
            "uncorrectable": int(rr.get("uncorrectable", 0)),
            "pending": bool(rr.get("pending", False)),
            "failed": bool(rr.get("failed", False)),
        }

    def temperature(self, index: int) -> float:
        return float(self._gpu("temperature", index).get("temperature_c", 35))

    def power(self, index: int) -> float:
        return float(self._gpu("power", index).get("power_w", 70))

    def persistence(self, index: int) -> bool:
        return bool(self._gpu("persistence", index).get("persistence", True))

    def throttle(self, index: int) -> List[str]:
        return [str(r) for r in (self._gpu("throttle", index).get("throttle_reasons") or [])]

    def nvlink(self, index: int) -> List[bool]:
        g = self._gpu("nvlink", index)
        nv = g.get("nvlink")
        if nv is None:
            nv = {"links": 18}
        if isinstance(nv, list):  # explicit per-link states
            return [str(s).lower() in ("active", "up", "true", "1") for s in nv]
        links = int(nv.get("links", 0))
        inactive = {int(i) for i in nv.get("inactive") or []}
        return [i not in inactive for i in range(links)]

    def processes(self, index: int) -> List[GpuProcess]:
        g = self._gpu("processes", index)
        out = []
        for p in g.get("processes") or []:
            pid = int(p["pid"])
            if pid_alive(pid):
                out.append(
                    GpuProcess(pid=pid, used_mib=float(p.get("used_mib", 0)), name=str(p.get("name", "")))
                )
        return out

    def memory_used_mib(self, index: int) -> float:
        g = self._gpu("memory", index)
        base = float(g.get("memory_used_mib", 0))
        return base + sum(p.used_mib for p in self._live(g))

    def _live(self, g: Dict[str, Any]) -> List[GpuProcess]:
        return [
            GpuProcess(pid=int(p["pid"]), used_mib=float(p.get("used_mib", 0)))
            for p in g.get("processes") or []
            if pid_alive(int(p["pid"]))
        ]

    def xid_events(self, since: float) -> List[XidEvent]:
        self._inject("xid", None)
        out = []
        for ev in self.data.get("xid_events") or []:
            ts = float(ev.get("timestamp", 0))
            if ts > since:
                out.append(
                    XidEvent(
                        xid=int(ev["xid"]),
                        timestamp=ts,
                        gpu=ev.get("gpu"),
                        pci=str(ev.get("pci", "")),
                        message=str(ev.get("message", "")),
                    )
                )
        return sorted(out, key=lambda e: e.timestamp)

    def nvlink_bandwidth_matrix(self) -> Optional[List[List[float]]]:
        self._inject("nvlink_bandwidth", None)
        spec = self.data.get("nvlink_bandwidth_gbps")
        if spec is None:
            return None
        n = len(self._gpus)
        if isinstance(spec, list):
            return [[float(v) for v in row] for row in spec]
        default = float(spec.get("default", 0))
        matrix = [[0.0 if i == j else default for j in range(n)] for i in range(n)]
        for key, value in (spec.get("pairs") or {}).items():
            a, _, b = str(key).partition("-")
            i, j = int(a), int(b)
            matrix[i][j] = float(value)
            if spec.get("symmetric", True):
                matrix[j][i] = float(value)
        for gpu, factor in (spec.get("gpu_factor") or {}).items():  # a whole GPU slower
            g = int(gpu)
            for k in range(n):
                if k != g:
                    matrix[g][k] *= float(factor)
                    matrix[k][g] *= float(factor)
        return matrix

    def heavy_value(self, name: str) -> Any:
        return (self.data.get("heavy") or {}).get(name)

    # ------------------------------------------------------------------ accounting

    def accounting_mode(self, index: int) -> Optional[bool]:
        g = self._gpu("accounting_mode", index)
        if index in self._accounting_override:
            return self._accounting_override[index]
        mode = g.get("accounting_mode", False)
        if mode == "unsupported":
            return None
        return bool(mode)

    def set_accounting_mode(self, index: int, enabled: bool) -> None:
        """Remembered for this process only: the fixture file is the node's boot state."""
        self._gpu("set_accounting_mode", index)
        self._accounting_override[index] = bool(enabled)

    def accounting_pids(self, index: int) -> List[int]:
        g = self._gpu("accounting_pids", index)
        if not self.accounting_mode(index):
            raise BackendError(
                f"NVML_ERROR_NOT_SUPPORTED in accounting_pids on GPU {index} (accounting mode is off)",
                code="NVML_NOT_SUPPORTED",
                gpu=index,
            )
        return [int(a["pid"]) for a in g.get("accounting") or [] if isinstance(a, dict) and "pid" in a]

    def accounting_stats(self, index: int, pid: int) -> Optional[AccountingStats]:
        g = self._gpu("accounting_stats", index)
        for a in g.get("accounting") or []:
            if not isinstance(a, dict) or int(a.get("pid", -1)) != pid:
                continue
            running = bool(a.get("running", False))
            time_ms = a.get("time_ms")
            return AccountingStats(
                pid=pid,
                gpu_util=_opt_float(a.get("gpu_util")),
                mem_util=_opt_float(a.get("mem_util")),
                max_memory_mib=_opt_float(a.get("max_memory_mib")),
                time_s=0.0 if running else (None if time_ms is None else float(time_ms) / 1000.0),
                start_time=_opt_float(a.get("start_time")),
                running=running,
            )
        return None


def _apply_scoped(data: Dict[str, Any], env) -> Dict[str, Any]:
    """Merge the ``scoped`` patches whose ``scope`` matches this process's job (or
    ``SLURMKIT_SIM_SCOPE``). A patch is merged key by key over the fixture; its
    ``gpus`` is a mapping ``index -> partial GPU`` merged over that GPU."""
    scopes = {JobEnv.from_env(env).job_id or "", str(env.get("SLURMKIT_SIM_SCOPE", ""))} - {""}
    patches = [
        p.get("patch") or {}
        for p in data.get("scoped") or []
        if isinstance(p, dict) and str(p.get("scope", "")) in scopes
    ]
    if not patches:
        return data
    out = dict(data)
    for patch in patches:
        gpus_patch = patch.get("gpus") or {}
        rest = {k: v for k, v in patch.items() if k != "gpus"}
        out = _merge(out, rest)
        if gpus_patch:
            gpus = [dict(g) for g in out.get("gpus") or []]
            for pos, g in enumerate(gpus):
                idx = g.get("index", pos)
                over = gpus_patch.get(idx, gpus_patch.get(str(idx)))
                if isinstance(over, dict):
                    gpus[pos] = _merge(g, over)
            out["gpus"] = gpus
    return out


def _merge(base: Dict[str, Any], over: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _opt_float(value: Any) -> Optional[float]:
    return None if value is None else float(value)


def _as_list(value: Any) -> List[Dict[str, Any]]:
    if value is None:
        return []
    return [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, dict)]
