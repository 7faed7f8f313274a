"""InfiniBand ports from sysfs, with a root prefix so tests read fixture trees.

``/sys/class/infiniband/<hca>/ports/<n>/state`` reads ``4: ACTIVE`` and ``rate`` reads
``400 Gb/sec (4X NDR)``. Two users: the ``infiniband`` health check (every port
ACTIVE at the expected rate) and ``ssubmit``, which builds ``NCCL_IB_HCA`` as
``=mlx5_X:1,...`` from the ports that are ACTIVE (never a bare prefix: NCCL matches
``mlx5_1`` against ``mlx5_10`` too; slurm-and-fleet-facts.md §12).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Sequence


@dataclass(frozen=True)
class IbPort:
    device: str  # mlx5_0
    port: int  # 1
    state: str  # ACTIVE, DOWN, INIT, ARMED, ...
    rate_gbps: Optional[float]
    link_layer: str = ""  # InfiniBand or Ethernet (RoCE)

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def hca_spec(self) -> str:
        """``mlx5_0:1``: the form NCCL_IB_HCA takes."""
        return f"{self.device}:{self.port}"


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _parse_state(text: str) -> str:
    # "4: ACTIVE" -> "ACTIVE"
    return text.split(":", 1)[-1].strip().upper() if text else "UNKNOWN"


def _parse_rate(text: str) -> Optional[float]:
    # "400 Gb/sec (4X NDR)" -> 400.0
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def ib_ports(root: str = "/sys", devices: Sequence[str] = ()) -> List[IbPort]:
    """Every port of every HCA under ``<root>/class/infiniband``, sorted by device then port."""
    base = os.path.join(root, "class", "infiniband")
    try:
        hcas = sorted(os.listdir(base))
    except OSError:
        return []
    wanted = set(devices)
    out: List[IbPort] = []
    for hca in hcas:
        if wanted and hca not in wanted:
            continue
        ports_dir = os.path.join(base, hca, "ports")
        try:
            ports = sorted(os.listdir(ports_dir), key=lambda p: int(p) if p.isdigit() else 0)
        except OSError:
            continue
        for p in ports:
            if not p.isdigit():
                continue
            d = os.path.join(ports_dir, p)
            out.append(
                IbPort(
                    device=hca,
                    port=int(p),
                    state=_parse_state(_read(os.path.join(d, "state"))),
                    rate_gbps=_parse_rate(_read(os.path.join(d, "rate"))),
                    link_layer=_read(os.path.join(d, "link_layer")),
                )
            )
    return out


def active_ib_ports(
    root: str = "/sys", min_rate_gbps: Optional[float] = None, link_layer: Optional[str] = None
) -> List[IbPort]:
    """Ports that are ACTIVE (and at least ``min_rate_gbps``, and of ``link_layer`` when given).

    This is what ``ssubmit`` should turn into ``NCCL_IB_HCA="=" + ",".join(p.hca_spec ...)``.
    """
    return [
        p
        for p in ib_ports(root)
        if p.active
        and (min_rate_gbps is None or (p.rate_gbps or 0) >= min_rate_gbps)
        and (link_layer is None or p.link_layer.lower() == link_layer.lower())
    ]
