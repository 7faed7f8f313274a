"""NCCL profiles per fabric, and the run-time InfiniBand port detection.

Profiles are data (``etc/nccl/<fabric>.yaml``), not code, so a site can tune them
without a release. A profile gives static variables (``NCCL_IB_TIMEOUT=22`` ...) and
says what must be detected on each node at run time:

* ``hca: auto`` - the ACTIVE HCA ports, read from
  ``/sys/class/infiniband/<dev>/ports/<port>/{state,rate,link_layer}``, written as
  ``NCCL_IB_HCA==mlx5_0:1,mlx5_1:1``. The leading ``=`` makes NCCL match names
  exactly; without it ``mlx5_1`` also selects ``mlx5_10`` and ``mlx5_11``
  (NVIDIA/nccl PR #236).
* ``socket_ifname: auto`` - the interface holding the node's own address, for
  ``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME``.

Everything here is a pure function over a sysfs root or interface table, so the
unit tests run against fixture trees; :mod:`slurmkit.submit.jobside` calls them on
the nodes.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurmkit.core.schema import Field, Section, validate
from slurmkit.core.yamlload import load_yaml_file
from slurmkit.errors import ConfigError

SYSFS_INFINIBAND = "/sys/class/infiniband"

PROFILE_SCHEMA = Section(
    {
        "description": Field("str", "", "What the profile is for."),
        "env": Field("dict", {}, "Variables exported as they are.", items=Field("str"), nullable=False),
        "hca": Field("any", None, "auto, a list of device:port, or null."),
        "socket_ifname": Field("str", None, "Bootstrap interface, or auto."),
        "min_nchannels_8gpu": Field("int", None, "NCCL_MIN_NCHANNELS when gpus_per_node >= 8.", min=1),
        "link_layer": Field(
            "str",
            None,
            "Link layer the detected ports must have (InfiniBand, Ethernet).",
            choices=["InfiniBand", "Ethernet"],
        ),
    }
)


def default_profiles_dir() -> str:
    """``etc/nccl`` of the slurmkit source tree (site config may point elsewhere)."""
    from slurmkit.resources import data_path

    return str(data_path("etc", "nccl"))


def load_profile(name: str, profiles_dir: Optional[str] = None) -> Dict[str, Any]:
    directory = profiles_dir or default_profiles_dir()
    path = os.path.join(directory, f"{name}.yaml")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not os.path.exists(path):
        have = (
            sorted(p[:-5] for p in os.listdir(directory) if p.endswith(".yaml"))
            if os.path.isdir(directory)
            else []
        )
        raise ConfigError(
            f"no NCCL profile {name!r} in {directory}; available: {', '.join(have) or 'none'}",
            key="nccl.profile",
        )
    return validate(load_yaml_file(path), PROFILE_SCHEMA, path)


# --------------------------------------------------------------------------- static env


def resolve_nccl(spec: Dict[str, Any], profiles_dir: Optional[str] = None) -> Dict[str, Any]:
    """What the batch script exports and what the nodes must detect.

    Returns ``{"profile", "env", "runtime"}``: ``env`` holds the variables known at
    submission (sorted when rendered); ``runtime`` tells the node-side launcher what to
    detect (``fabric``, ``hca``, ``socket_ifname``, ``expected_rate_gbps``, and for
    ``fabric: auto`` the profiles to choose from).
    """
    fabric = spec["fabric"]
    nccl = spec["nccl"]
    runtime: Dict[str, Any] = {
        "fabric": fabric,
        "hca": None,
        "socket_ifname": None,
        "expected_rate_gbps": nccl["expected_rate_gbps"],
        "link_layer": None,
    }
    env: Dict[str, str] = {}
    profile_name = nccl["profile"] or (fabric if fabric != "auto" else None)
    if profile_name:
        profile = load_profile(profile_name, profiles_dir)
        env.update(profile["env"])
        runtime["link_layer"] = profile["link_layer"]
        hca = profile["hca"]
        ifname = profile["socket_ifname"]
        if profile["min_nchannels_8gpu"] and spec["gpus_per_node"] >= 8:
            env["NCCL_MIN_NCHANNELS"] = str(profile["min_nchannels_8gpu"])
    else:  # fabric: auto: decided per node at run time
        hca, ifname = "auto", "auto"
        for candidate in ("infiniband", "roce", "ethernet"):
            load_profile(candidate, profiles_dir)  # fail at submission if one is missing
    if nccl["hca"] is not None:
        hca = nccl["hca"]
    if nccl["socket_ifname"] is not None:
        ifname = nccl["socket_ifname"]
    if isinstance(hca, list):
        env["NCCL_IB_HCA"] = hca_env_value(hca)
    elif hca == "auto":
        runtime["hca"] = "auto"
    if ifname == "auto":
        runtime["socket_ifname"] = "auto"
    elif ifname:
        env["NCCL_SOCKET_IFNAME"] = ifname
        env["GLOO_SOCKET_IFNAME"] = ifname.lstrip("=^")
    if nccl["ib_timeout"] is not None:
        env["NCCL_IB_TIMEOUT"] = str(nccl["ib_timeout"])
    if nccl["gid_index"] is not None:
        env["NCCL_IB_GID_INDEX"] = str(nccl["gid_index"])
    if nccl["min_nchannels"] is not None:
        env["NCCL_MIN_NCHANNELS"] = str(nccl["min_nchannels"])
    if nccl["debug"]:
        env["NCCL_DEBUG"] = nccl["debug"]
    env.update(nccl["env"])
    return {"profile": profile_name or "auto", "env": env, "runtime": runtime}


def hca_env_value(ports: Iterable[str]) -> str:
    """``["mlx5_0:1", "mlx5_1:1"]`` -> ``"=mlx5_0:1,mlx5_1:1"`` (exact-match prefix)."""
    items = [p.strip().lstrip("=") for p in ports if p.strip()]
    return "=" + ",".join(items)


# --------------------------------------------------------------------------- sysfs detection


@dataclass(frozen=True)
class HcaPort:
    """One port of one HCA as sysfs describes it."""

    device: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED, ... (from "4: ACTIVE")
    rate_gbps: float  # from "400 Gb/sec (4X NDR)"; 0 when unreadable
    link_layer: str  # InfiniBand or Ethernet
    has_netdev: bool  # False for phantom HCAs (no net device behind them)

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}"

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def detect_hca_ports(root: str = SYSFS_INFINIBAND) -> List[HcaPort]:
    """Every port under ``root`` (``/sys/class/infiniband``), in natural order.

    Reads sysfs through :func:`slurmkit.hw.read_ib_class`, the one reader of
    those files, and normalises what ssubmit's selection expects: an unreadable rate is
    0 and a missing link layer is InfiniBand. A missing ``root`` gives ``[]``.
    """
    from slurmkit.hw import read_ib_class

    return [
        HcaPort(p.device, p.port, p.state, p.rate_gbps or 0.0, p.link_layer or "InfiniBand", p.has_netdev)
        for p in read_ib_class(root)
    ]


@dataclass
class FabricSelection:
    """The outcome of selecting HCA ports on one node."""

    ports: List[str]  # device:port names selected
    rate_gbps: float  # lowest rate among selected ports (0 if none)
    link_layer: Optional[str]
    problems: List[str]  # why the node is unfit (empty = fit)
    warnings: List[str]

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def select_hca_ports(
    ports: Sequence[HcaPort],
    *,
    link_layer: Optional[str] = None,
    expected_rate_gbps: Optional[float] = None,
    exclude: Sequence[str] = (),
) -> FabricSelection:
    """Choose the ports NCCL should use: ACTIVE, right link layer, at the expected rate.

    A port of a matching link layer that is not ACTIVE, or is slower than
    ``expected_rate_gbps``, is a *problem* (the node should not run this job). RoCE
    devices without a net device (phantom HCAs) and ``exclude`` globs (e.g.
    ``mlx5_bond_*``) are skipped with a warning.
    """
    selected: List[HcaPort] = []
    problems: List[str] = []
    warnings: List[str] = []
    for p in ports:
        if any(fnmatch.fnmatch(p.device, pat) for pat in exclude):
            warnings.append(f"{p.name}: skipped (matches exclude pattern)")
            continue
        if link_layer and p.link_layer != link_layer:
            continue
        if p.link_layer == "Ethernet" and not p.has_netdev:
            warnings.append(f"{p.name}: skipped (RoCE device without a net device)")
            continue
        if p.state != "ACTIVE":
            problems.append(f"{p.name} is {p.state}")
            continue
        if expected_rate_gbps and p.rate_gbps < expected_rate_gbps:
            problems.append(f"{p.name} runs at {p.rate_gbps:g} Gb/s, expected {expected_rate_gbps:g}")
            continue
        selected.append(p)
    layers = sorted({p.link_layer for p in selected})
    return FabricSelection(
        ports=[p.name for p in selected],
        rate_gbps=min((p.rate_gbps for p in selected), default=0.0),
        link_layer=layers[0] if len(layers) == 1 else (",".join(layers) or None),
        problems=problems,
        warnings=warnings,
    )


def fabric_for_ports(ports: Sequence[HcaPort]) -> str:
    """``fabric: auto`` decision for one node: infiniband, roce or ethernet (fallback)."""
    active = [p for p in ports if p.state == "ACTIVE" and (p.link_layer != "Ethernet" or p.has_netdev)]
    if any(p.link_layer == "InfiniBand" for p in active):
        return "infiniband"
    if any(p.link_layer == "Ethernet" for p in active):
        return "roce"
    return "ethernet"


def compare_nodes(
    summaries: Mapping[str, Mapping[str, Any]], expected_rate_gbps: Optional[float] = None
) -> Dict[str, str]:
    """Find nodes whose fabric disagrees with the job's majority.

    ``summaries`` maps node -> ``{"fabric", "ports", "rate_gbps", "problems"}`` (as
    written by ``jobside detect``). A node is bad when it has problems (a port down,
    too slow), a different fabric, fewer ports, or a lower rate than the majority.
    Returns ``{node: reason}``; empty when all nodes agree.
    """
    bad: Dict[str, str] = {}
    for node, s in summaries.items():
        if s.get("problems"):
            bad[node] = "; ".join(s["problems"])
    good = {n: s for n, s in summaries.items() if n not in bad}
    if not good:
        return bad
    fabric_major, _ = Counter(s.get("fabric") for s in good.values()).most_common(1)[0]
    nports_major, _ = Counter(len(s.get("ports") or []) for s in good.values()).most_common(1)[0]
    rate_ref = (
        expected_rate_gbps or Counter(s.get("rate_gbps") or 0 for s in good.values()).most_common(1)[0][0]
    )
    for node, s in sorted(good.items()):
        if s.get("fabric") != fabric_major:
            bad[node] = f"fabric {s.get('fabric')} while the other nodes have {fabric_major}"
        elif len(s.get("ports") or []) < nports_major:
            bad[node] = (
                f"{len(s.get('ports') or [])} ACTIVE HCA ports while the other nodes have {nports_major}"
            )
        elif s.get("ports") and (s.get("rate_gbps") or 0) < rate_ref:
            bad[node] = f"HCA rate {s.get('rate_gbps'):g} Gb/s below {rate_ref:g}"
    return bad


# --------------------------------------------------------------------------- socket interface


def _is_loopback(addr: str) -> bool:
    return addr.startswith("127.") or addr in ("::1", "localhost") or addr == "0.0.0.0"


def interface_for_address(address: str, if_addrs: Mapping[str, Iterable[str]]) -> Optional[str]:
    """The interface that holds ``address`` (``if_addrs``: name -> addresses)."""
    for name in sorted(if_addrs):
        if address in set(if_addrs[name]):
            return name
    return None


def pick_socket_ifname(
    node_addresses: Sequence[str], if_addrs: Mapping[str, Iterable[str]]
) -> Tuple[Optional[str], Optional[str]]:
    """Choose the bootstrap interface for ``socket_ifname: auto``.

    First choice: the interface holding one of the node's own (resolved, non-loopback)
    addresses, so the other nodes can reach it. Fallback: the first non-loopback
    interface with an IPv4 address, with a warning. Returns ``(ifname, warning)``.
    """
    for addr in node_addresses:
        if _is_loopback(addr):
            continue
        name = interface_for_address(addr, if_addrs)
        if name:
            return name, None
    for name in sorted(if_addrs):
        if name == "lo":
            continue
        v4 = [a for a in if_addrs[name] if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", a) and not _is_loopback(a)]
        if v4:
            return name, (
                f"no interface holds this node's address ({', '.join(node_addresses) or 'unresolved'}); "
                f"using {name}"
            )
    return None, "no non-loopback interface found; leaving NCCL/Gloo to pick one"


def local_if_addrs() -> Dict[str, List[str]]:
    """Interface name -> addresses of this host (psutil; no process spawned)."""
    import socket

    import psutil

    out: Dict[str, List[str]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        out[name] = [a.address.split("%")[0] for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
    return out
