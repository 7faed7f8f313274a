"""Node hardware read from sysfs: InfiniBand ports, with a root prefix so tests read fixture trees.

``/sys/class/infiniband/<hca>/ports/<n>/state`` reads ``4: ACTIVE`` and ``rate`` reads
``400 Gb/sec (4X NDR)``. Two users: the ``infiniband`` health check (every port
ACTIVE at the expected rate) and ``ssubmit``, which builds ``NCCL_IB_HCA`` as
``=mlx5_X:1,...`` from the ports that are ACTIVE (never a bare prefix: NCCL matches
``mlx5_1`` against ``mlx5_10`` too; NCCL's environment docs,
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
"""

from __future__ import annotations

import os

from slurmkit.values import FrozenValue

_DIGITS = frozenset("0123456789")

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import List, Optional, Sequence


class IbPort(FrozenValue):
    device: str  # mlx5_0
    port: int  # 1
    state: str  # ACTIVE, DOWN, INIT, ARMED, ...
    rate_gbps: Optional[float]
    link_layer: str  # InfiniBand or Ethernet (RoCE)
    has_netdev: bool  # False for phantom HCAs with no net device behind them

    def __init__(
        self,
        device: str,
        port: int,
        state: str,
        rate_gbps: Optional[float],
        link_layer: str = "",
        has_netdev: bool = True,
    ) -> None:
        self._set(
            device=device,
            port=port,
            state=state,
            rate_gbps=rate_gbps,
            link_layer=link_layer,
            has_netdev=has_netdev,
        )

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def hca_spec(self) -> str:
        """``mlx5_0:1``: the form NCCL_IB_HCA takes."""
        return f"{self.device}:{self.port}"


def _read(path: str) -> str:
    try:
        # utf-8, not ascii: the kernel writes ASCII, and utf-8's codec is loaded at start-up
        with open(path, encoding="utf-8", errors="replace") as fh:
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


def _natural_key(text: str) -> list:
    """``mlx5_2`` before ``mlx5_10``: the text split into runs of ASCII digits (as numbers) and of
    anything else, alternating, text first (``""`` when it starts with a digit)."""
    key: list = []
    run = ""
    for c in text:
        if (c in _DIGITS) != (len(key) % 2 == 1):  # even places hold text, odd ones numbers
            key.append(int(run) if len(key) % 2 else run)
            run = ""
        run += c
    key.append(int(run) if len(key) % 2 else run)
    return key


def read_ib_class(class_dir: str, devices: Sequence[str] = ()) -> List[IbPort]:
    """Every port of every HCA under ``class_dir`` (``/sys/class/infiniband``), in
    natural order (device, then port). A missing directory (no InfiniBand) gives ``[]``."""
    try:
        hcas = sorted(os.listdir(class_dir), key=_natural_key)
    except OSError:
        return []
    wanted = set(devices)
    out: List[IbPort] = []
    for hca in hcas:
        if wanted and hca not in wanted:
            continue
        ports_dir = os.path.join(class_dir, hca, "ports")
        try:
            ports = sorted((p for p in os.listdir(ports_dir) if p.isdigit()), key=int)
        except OSError:
            continue
        netdir = os.path.join(class_dir, hca, "device", "net")
        has_netdev = os.path.isdir(netdir) and bool(os.listdir(netdir))
        for p in ports:
            d = os.path.join(ports_dir, p)
            out.append(
                IbPort(
                    device=hca,
                    port=int(p),
                    state=_parse_state(_read(os.path.join(d, "state"))),
                    rate_gbps=_parse_rate(_read(os.path.join(d, "rate"))),
                    link_layer=_read(os.path.join(d, "link_layer")),
                    has_netdev=has_netdev,
                )
            )
    return out


def ib_ports(root: str = "/sys", devices: Sequence[str] = ()) -> List[IbPort]:
    """Every port of every HCA under ``<root>/class/infiniband`` (``root`` lets tests use fixture trees)."""
    return read_ib_class(os.path.join(root, "class", "infiniband"), devices)
