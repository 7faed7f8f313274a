"""Sweep probes that are not GPU checks: checkpoint storage throughput, and the
choice of node pairs for the 2-node all_reduce from ``topology.conf``.

Checkpoint storage
------------------
The rule of the article "How to Build a GPU Cluster for AI Training (No BS Guide)": a node must write its checkpoint within the checkpoint
window, so the needed throughput is *model size / window*. It also says ">10 GB/s per
node" and, for a 200 GB model and a 5-minute window, "2 GB/s"; the arithmetic gives
200 / 300 = 0.67 GB/s, which is what :func:`needed_gbps` returns (the 10 GB/s figure
is a rule of thumb for large models and short windows, not a law).

The probe writes ``size_mb`` MiB to a fresh file in the checkpoint directory in
``block_mb`` blocks, ``fsync``s it (a checkpoint is not written until it is on the
server), drops the file's cached pages with ``posix_fadvise(DONTNEED)`` so the
read-back measures the filesystem rather than the page cache where the kernel allows
it, reads it back, and removes it. GB here is 10^9 bytes (the unit storage vendors
quote).
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from slurmkit.slurm.jobenv import JobEnv
from slurmkit.slurm.parse import ParseError, conf_records, expand_hostlist
from slurmkit.verdict.base import Action, CheckResult, Status

GB = 1e9
MiB = 1024 * 1024


def needed_gbps(model_size_gb: float, window_s: float) -> float:
    """Write throughput (GB/s) a node needs to save ``model_size_gb`` within ``window_s``.

    >>> round(needed_gbps(200, 300), 2)
    0.67
    """
    if window_s <= 0:
        raise ValueError("the checkpoint window must be positive")
    return float(model_size_gb) / float(window_s)


@dataclass
class StorageMeasurement:
    path: str
    bytes: int
    write_s: float
    read_s: float

    @property
    def write_gbps(self) -> float:
        return self.bytes / GB / self.write_s if self.write_s > 0 else float("inf")

    @property
    def read_gbps(self) -> float:
        return self.bytes / GB / self.read_s if self.read_s > 0 else float("inf")


def measure_storage(
    directory: str,
    size_mb: int = 1024,
    block_mb: int = 16,
    *,
    drop_cache: bool = True,
    deadline_s: Optional[float] = None,
) -> StorageMeasurement:
    """Write, fsync, read back and delete a ``size_mb`` MiB file in ``directory``.

    Raises :class:`OSError` (with the path) when the directory is missing or not
    writable, and :class:`TimeoutError` past ``deadline_s``.
    """
    block = os.urandom(min(block_mb, size_mb) * MiB)  # incompressible: no dedup/compression shortcuts
    total = size_mb * MiB
    path = os.path.join(directory, f".slurmkit-storage-probe-{os.uname().nodename}-{uuid.uuid4().hex[:8]}")
    start_all = time.monotonic()

    def check_deadline() -> None:
        if deadline_s is not None and time.monotonic() - start_all > deadline_s:
            raise TimeoutError(f"storage probe in {directory} ran past {deadline_s:g}s")

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        t0 = time.monotonic()
        written = 0
        view = memoryview(block)
        while written < total:
            n = os.write(fd, view[: min(len(block), total - written)])
            written += n
            check_deadline()
        os.fsync(fd)
        write_s = time.monotonic() - t0
        os.close(fd)
        fd = -1
        rfd = os.open(path, os.O_RDONLY)
        try:
            if drop_cache and hasattr(os, "posix_fadvise"):
                try:
                    os.posix_fadvise(rfd, 0, 0, os.POSIX_FADV_DONTNEED)
                except OSError:
                    pass
            t1 = time.monotonic()
            read = 0
            while True:
                chunk = os.read(rfd, len(block))
                if not chunk:
                    break
                read += len(chunk)
                check_deadline()
            read_s = time.monotonic() - t1
        finally:
            os.close(rfd)
        if read != total:
            raise OSError(f"read back {read} of {total} bytes from {path}")
        return StorageMeasurement(directory, total, write_s, read_s)
    finally:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def storage_checks(cfg: Mapping[str, Any], *, deadline_s: Optional[float] = None) -> List[CheckResult]:
    """``storage_write`` and ``storage_read`` results from the ``sweep.storage`` config."""
    path = cfg.get("path")
    if not cfg.get("enabled", True) or not path:
        return []  # nothing configured to probe: no verdict rather than a permanent "unknown"
    min_write = cfg.get("min_write_gbps")
    if min_write is None and cfg.get("model_size_gb"):
        min_write = needed_gbps(cfg["model_size_gb"], cfg.get("checkpoint_window_s") or 300.0)
    min_read = cfg.get("min_read_gbps")
    started = time.time()
    try:
        m = measure_storage(
            path,
            cfg.get("size_mb", 1024),
            cfg.get("block_mb", 16),
            drop_cache=cfg.get("drop_cache", True),
            deadline_s=deadline_s,
        )
    except TimeoutError as exc:
        return [
            CheckResult(
                "storage_write",
                Status.FAIL,
                "STORAGE_TIMEOUT",
                str(exc),
                Action.MONITOR,
                seconds=time.time() - started,
            )
        ]
    except OSError as exc:
        where = exc.filename or path
        return [
            CheckResult(
                "storage_write",
                Status.FAIL,
                "STORAGE_IO",
                f"{where}: {exc.strerror or exc}",
                Action.MONITOR,
                seconds=time.time() - started,
            )
        ]
    details = {"path": path, "bytes": m.bytes, "write_s": round(m.write_s, 4), "read_s": round(m.read_s, 4)}
    results = []
    for name, value, floor, code in (
        ("storage_write", m.write_gbps, min_write, "STORAGE_WRITE_SLOW"),
        ("storage_read", m.read_gbps, min_read, "STORAGE_READ_SLOW"),
    ):
        value = round(value, 4)
        d = dict(details, floor_gbps=floor)
        if floor is not None and value < floor:
            results.append(
                CheckResult(
                    name,
                    Status.FAIL,
                    code,
                    f"{value:.3g} GB/s to {path}, need {floor:.3g} GB/s",
                    Action.MONITOR,
                    value=value,
                    unit="GB/s",
                    details=d,
                )
            )
        else:
            results.append(
                CheckResult(
                    name, Status.OK, "OK", f"{value:.3g} GB/s to {path}", value=value, unit="GB/s", details=d
                )
            )
    return results


# --------------------------------------------------------------------------- topology.conf


@dataclass
class Topology:
    """Leaf switches and the nodes under them, from ``topology.conf`` (tree plugin)."""

    leaf_of: Dict[str, str]  # node -> leaf switch
    parents: Dict[str, str]  # switch -> parent switch

    def leaves(self) -> Dict[str, List[str]]:
        out: Dict[str, List[str]] = {}
        for node, leaf in self.leaf_of.items():
            out.setdefault(leaf, []).append(node)
        return {k: sorted(v) for k, v in out.items()}


def parse_topology_conf(text: str, path: str = "topology.conf") -> Topology:
    """Parse ``SwitchName=s1 Nodes=node[1-4]`` / ``SwitchName=top Switches=s[1-2]`` lines."""
    from slurmkit.errors import ConfigError

    leaf_of: Dict[str, str] = {}
    parents: Dict[str, str] = {}
    for lineno, fields in conf_records(text):
        name = fields.get("switchname")
        if not name:
            raise ConfigError("expected SwitchName=...", path=path, line=lineno)
        try:
            for node in expand_hostlist(fields.get("nodes", "")) if fields.get("nodes") else []:
                leaf_of[node] = name
            for sw in expand_hostlist(fields.get("switches", "")) if fields.get("switches") else []:
                parents[sw] = name
        except ParseError as exc:
            raise ConfigError(str(exc), path=path, line=lineno) from None
    return Topology(leaf_of, parents)


def find_topology_conf(configured: Optional[str], slurm_conf: Optional[str]) -> Optional[str]:
    if configured:
        return configured
    conf = slurm_conf or JobEnv.from_env().conf_path
    candidate = os.path.join(os.path.dirname(conf), "topology.conf")
    return candidate if os.path.exists(candidate) else None


def select_pairs(
    idle_nodes: Iterable[str],
    last_pair_test: Mapping[str, Optional[float]],
    topology: Optional[Topology],
    max_pairs: int,
) -> List[Tuple[str, str]]:
    """Pick up to ``max_pairs`` disjoint node pairs for 2-node all_reduce jobs.

    Nodes whose last pairwise test is oldest (never first) go first. Each is paired
    with the oldest-tested idle node under a *different* leaf switch when there is
    one, so the leaf uplinks and spine get exercised over time, not only the NIC and
    its leaf; without a ``topology.conf`` (or with a single leaf) with the next oldest.
    """

    def key(n: str) -> tuple:
        lp = last_pair_test.get(n)
        return (0 if lp is None else 1, lp or 0.0, n)

    pool = sorted(set(idle_nodes), key=key)
    leaf_of = topology.leaf_of if topology else {}
    pairs: List[Tuple[str, str]] = []
    used: set = set()
    for a in pool:
        if len(pairs) >= max_pairs:
            break
        if a in used:
            continue
        rest = [b for b in pool if b != a and b not in used]
        if not rest:
            break
        cross = [b for b in rest if leaf_of.get(b) != leaf_of.get(a)] if leaf_of else []
        b = (cross or rest)[0]
        pairs.append((a, b))
        used.update((a, b))
    return pairs
