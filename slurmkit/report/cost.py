"""Money and capacity: GPU-hour prices, the share of available GPU-hours used, and
the build-versus-rent break-even.

Prices
------
A price is per GPU-hour. ``--price 2.50`` sets one price for every GPU type;
``--price h100=3.10,a100=1.20,default=2.00`` sets them per type; otherwise the site
config's ``report.prices`` (per type, ``default`` key for the rest) applies. A job's
cost is the sum over its GPU types of ``GPUs of that type x hours x price of that
type``; untyped GPUs use ``default``. With no price anywhere the cost column is left
out rather than shown as zero.

Capacity
--------
``capacity = sum over nodes of GPUs in the node's Gres x window hours`` (from
``sinfo``: ``gpu:h100:8(S:0-1)`` → 8 h100 GPUs). A node listed in several partitions
counts once in the total and once in each partition's row. ``used / capacity`` is
the utilisation of the installed GPUs; nodes that were down still count as
available, because the report cannot know historical node states from sinfo.

Build versus rent
-----------------
``rent per month = GPUs x price per GPU-hour x hours per month x utilisation``
``own per month = power + cooling + staff``
``break-even months = hardware / (rent per month - own per month)``
(never, when renting is no dearer than running your own). ``hours per month`` is
730 (8760 / 12).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from slurmkit.errors import ConfigError, UsageError
from slurmkit.slurm import parse

HOURS_PER_MONTH = 8760 / 12  # 730

UNTYPED = "untyped"


@dataclass
class PriceTable:
    """Price per GPU-hour by GPU type; ``default`` for types not listed and untyped GPUs."""

    by_type: Dict[str, float] = field(default_factory=dict)
    default: Optional[float] = None
    currency: str = "USD"

    @property
    def enabled(self) -> bool:
        return self.default is not None or bool(self.by_type)

    def price(self, gpu_type: str) -> float:
        p = self.by_type.get(gpu_type, self.default)
        return 0.0 if p is None else p

    def priced_gpus(self, gpus: int, gpu_types: Tuple[Tuple[str, int], ...]) -> float:
        """``sum(n_t x price_t)`` for one allocation: its cost per hour."""
        total = 0.0
        typed = 0
        for t, n in gpu_types:
            total += n * self.price(t)
            typed += n
        if gpus > typed:
            total += (gpus - typed) * self.price(UNTYPED)
        return total

    def to_dict(self) -> Dict[str, Any]:
        return {"currency": self.currency, "default": self.default, "by_type": dict(self.by_type)}


def parse_price_option(text: str) -> Tuple[Optional[float], Dict[str, float]]:
    """``2.50`` → (2.5, {}); ``h100=3.1,default=2`` → (2.0, {"h100": 3.1})."""
    text = (text or "").strip()
    try:
        if "=" not in text:
            value = float(text)
            if value < 0:
                raise ValueError
            return value, {}
        default: Optional[float] = None
        by_type: Dict[str, float] = {}
        for item in text.split(","):
            key, _, val = item.partition("=")
            key, price = key.strip(), float(val)
            if not key or price < 0:
                raise ValueError
            if key == "default":
                default = price
            else:
                by_type[key] = price
        return default, by_type
    except ValueError:
        raise UsageError(
            f"--price {text!r}: expected a price per GPU-hour (2.50) or TYPE=PRICE pairs "
            f"(h100=3.10,a100=1.20,default=2.00)"
        ) from None


def price_table(config: Mapping[str, Any], option: Optional[str] = None) -> PriceTable:
    """The effective prices: ``--price`` wins over the config's ``prices``."""
    currency = config.get("currency") or "USD"
    if option:
        default, by_type = parse_price_option(option)
        return PriceTable(by_type, default, currency)
    prices = dict(config.get("prices") or {})
    default = prices.pop("default", None)
    return PriceTable(
        {k: float(v) for k, v in prices.items()}, None if default is None else float(default), currency
    )


# --------------------------------------------------------------------------- capacity


def gpus_from_gres(gres: str) -> Dict[str, int]:
    """``{type: count}`` from an sinfo Gres column; untyped GPUs under ``untyped``."""
    return parse.gpus_from_gres(gres, untyped=UNTYPED)


@dataclass
class NodeGpus:
    name: str
    gpus: Dict[str, int]
    partitions: List[str]
    state: str = ""

    @property
    def total(self) -> int:
        return sum(self.gpus.values())


def node_inventory(rows: Iterable[Mapping[str, str]]) -> Dict[str, NodeGpus]:
    """Merge ``client.nodes()`` rows (one per node and partition) into one per node."""
    out: Dict[str, NodeGpus] = {}
    for row in rows:
        name = row.get("name", "")
        if not name:
            continue
        part = (row.get("partition") or "").rstrip("*")
        node = out.get(name)
        if node is None:
            node = out[name] = NodeGpus(name, gpus_from_gres(row.get("gres", "")), [], row.get("state", ""))
        if part and part not in node.partitions:
            node.partitions.append(part)
    return out


# --------------------------------------------------------------------------- build vs rent


@dataclass
class BuildVsRent:
    hardware: float
    power_per_month: float
    cooling_per_month: float
    staff_per_month: float
    gpus: int
    rent_per_gpu_hour: float
    utilization: float = 1.0
    hours_per_month: float = HOURS_PER_MONTH
    currency: str = "USD"

    @property
    def own_per_month(self) -> float:
        return self.power_per_month + self.cooling_per_month + self.staff_per_month

    @property
    def rent_per_month(self) -> float:
        return self.gpus * self.rent_per_gpu_hour * self.hours_per_month * self.utilization

    @property
    def saving_per_month(self) -> float:
        return self.rent_per_month - self.own_per_month

    @property
    def break_even_months(self) -> Optional[float]:
        if self.saving_per_month <= 0:
            return None
        return self.hardware / self.saving_per_month

    def total_cost(self, months: float) -> Tuple[float, float]:
        """``(own, rent)`` cumulative cost after ``months``."""
        return self.hardware + self.own_per_month * months, self.rent_per_month * months

    def to_dict(self) -> Dict[str, Any]:
        be = self.break_even_months
        return {
            "inputs": {
                "hardware": self.hardware,
                "power_per_month": self.power_per_month,
                "cooling_per_month": self.cooling_per_month,
                "staff_per_month": self.staff_per_month,
                "gpus": self.gpus,
                "rent_per_gpu_hour": self.rent_per_gpu_hour,
                "utilization": self.utilization,
                "hours_per_month": self.hours_per_month,
                "currency": self.currency,
            },
            "own_per_month": round(self.own_per_month, 2),
            "rent_per_month": round(self.rent_per_month, 2),
            "saving_per_month": round(self.saving_per_month, 2),
            "break_even_months": None if be is None else round(be, 2),
        }


BUILD_VS_RENT_KEYS = {
    "hardware": "purchase cost of the cluster (one-time)",
    "power_per_month": "electricity per month",
    "cooling_per_month": "cooling per month",
    "staff_per_month": "staff per month",
    "gpus": "number of GPUs rented instead",
    "rent_per_gpu_hour": "rental price per GPU-hour",
    "utilization": "fraction of hours the rented GPUs would be paid for (0-1]",
    "hours_per_month": "hours in a month (default 730)",
    "currency": "currency label",
}


def build_vs_rent_from_mapping(data: Mapping[str, Any], path: str = "") -> BuildVsRent:
    """Validate a build-vs-rent YAML mapping (unknown keys listed with the valid ones)."""
    from slurmkit.core.schema import Field, Section, validate

    schema = Section(
        {
            "hardware": Field("float", None, BUILD_VS_RENT_KEYS["hardware"], min=0, required=True),
            "power_per_month": Field(
                "float", 0.0, BUILD_VS_RENT_KEYS["power_per_month"], min=0, nullable=False
            ),
            "cooling_per_month": Field(
                "float", 0.0, BUILD_VS_RENT_KEYS["cooling_per_month"], min=0, nullable=False
            ),
            "staff_per_month": Field(
                "float", 0.0, BUILD_VS_RENT_KEYS["staff_per_month"], min=0, nullable=False
            ),
            "gpus": Field("int", None, BUILD_VS_RENT_KEYS["gpus"], min=1, required=True),
            "rent_per_gpu_hour": Field(
                "float", None, BUILD_VS_RENT_KEYS["rent_per_gpu_hour"], min=0, required=True
            ),
            "utilization": Field(
                "float", 1.0, BUILD_VS_RENT_KEYS["utilization"], min=0.000001, max=1, nullable=False
            ),
            "hours_per_month": Field(
                "float", HOURS_PER_MONTH, BUILD_VS_RENT_KEYS["hours_per_month"], min=1, nullable=False
            ),
            "currency": Field("str", "USD", BUILD_VS_RENT_KEYS["currency"], nullable=False),
        }
    )
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of build-vs-rent inputs", path=path or None)
    v = validate(data, schema, path or None)
    return BuildVsRent(
        v["hardware"],
        v["power_per_month"],
        v["cooling_per_month"],
        v["staff_per_month"],
        v["gpus"],
        v["rent_per_gpu_hour"],
        v["utilization"],
        v["hours_per_month"],
        v["currency"],
    )
