"""NCCL profiles and HCA detection against fixture sysfs trees."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Tuple

import pytest

from slurmkit.errors import ConfigError
from slurmkit.submit import nccl
from slurmkit.submit.spec import validate_spec

# port description: (state, rate, link_layer); "netdev" adds device/net/<if>
Port = Tuple[str, str, str]


def make_sysfs(root: Path, devices: Dict[str, Dict[int, Port]], netdev: Tuple[str, ...] = ()) -> str:
    """Build /sys/class/infiniband-like files: <dev>/ports/<n>/{state,rate,link_layer}."""
    for dev, ports in devices.items():
        for num, (state, rate, layer) in ports.items():
            d = root / dev / "ports" / str(num)
            d.mkdir(parents=True)
            (d / "state").write_text(state + "\n")
            (d / "rate").write_text(rate + "\n")
            (d / "link_layer").write_text(layer + "\n")
        if dev in netdev:
            (root / dev / "device" / "net" / f"eth_{dev}").mkdir(parents=True)
    return str(root)


ACTIVE_400 = ("4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")


def h100_node(root: Path, down: Tuple[str, ...] = (), slow: Tuple[str, ...] = ()) -> str:
    devices = {}
    for i in list(range(8)) + [10, 11]:  # mlx5_10/11 exist: the prefix trap
        name = f"mlx5_{i}"
        state, rate, layer = ACTIVE_400
        if name in down:
            state = "1: DOWN"
        if name in slow:
            rate = "200 Gb/sec (4X HDR)"
        devices[name] = {1: (state, rate, layer)}
    return make_sysfs(root, devices)


def test_detects_ports_in_natural_order(tmp_path):
    ports = nccl.detect_hca_ports(h100_node(tmp_path))
    assert [p.name for p in ports][:3] == ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1"]
    assert [p.name for p in ports][-2:] == ["mlx5_10:1", "mlx5_11:1"]
    assert ports[0].state == "ACTIVE" and ports[0].rate_gbps == 400 and ports[0].link_layer == "InfiniBand"


def test_hca_value_uses_exact_match_prefix(tmp_path):
    sel = nccl.select_hca_ports(nccl.detect_hca_ports(h100_node(tmp_path)), link_layer="InfiniBand")
    value = nccl.hca_env_value(sel.ports)
    assert value.startswith("=mlx5_0:1,mlx5_1:1,")
    assert value.count(",") == 9 and "mlx5_11:1" in value
    assert sel.problems == [] and sel.rate_gbps == 400
    assert nccl.hca_env_value(["mlx5_1:1"]) == "=mlx5_1:1"  # never the bare prefix mlx5_1


def test_down_and_slow_ports_are_problems(tmp_path):
    ports = nccl.detect_hca_ports(h100_node(tmp_path, down=("mlx5_3",), slow=("mlx5_5",)))
    sel = nccl.select_hca_ports(ports, link_layer="InfiniBand", expected_rate_gbps=400)
    assert "mlx5_3:1 is DOWN" in sel.problems
    assert "mlx5_5:1 runs at 200 Gb/s, expected 400" in sel.problems
    assert "mlx5_3:1" not in sel.ports and "mlx5_5:1" not in sel.ports


def test_roce_without_netdev_and_excluded_bond_are_skipped(tmp_path):
    roce = ("4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet")
    root = make_sysfs(
        tmp_path,
        {"mlx5_0": {1: roce}, "mlx5_1": {1: roce}, "mlx5_bond_0": {1: roce}},
        netdev=("mlx5_0", "mlx5_bond_0"),
    )
    sel = nccl.select_hca_ports(nccl.detect_hca_ports(root), link_layer="Ethernet", exclude=["mlx5_bond_*"])
    assert sel.ports == ["mlx5_0:1"]
    assert any("without a net device" in w for w in sel.warnings)
    assert any("exclude pattern" in w for w in sel.warnings)
    assert nccl.fabric_for_ports(nccl.detect_hca_ports(root)) == "roce"


def test_no_infiniband_falls_back_to_sockets(tmp_path):
    assert nccl.detect_hca_ports(str(tmp_path / "missing")) == []
    assert nccl.fabric_for_ports([]) == "ethernet"
    down_only = make_sysfs(tmp_path / "d", {"mlx5_0": {1: ("1: DOWN", "400 Gb/sec", "InfiniBand")}})
    assert nccl.fabric_for_ports(nccl.detect_hca_ports(down_only)) == "ethernet"
    assert nccl.fabric_for_ports(nccl.detect_hca_ports(h100_node(tmp_path / "ib"))) == "infiniband"


def test_jobside_detect_summary_on_fixture_tree(tmp_path, monkeypatch):
    from slurmkit.submit.jobside import detect_summary

    monkeypatch.setenv("SLURMD_NODENAME", "gpu007")
    good = detect_summary("auto", h100_node(tmp_path / "a"), None, None)
    assert good["fabric"] == "infiniband" and len(good["ports"]) == 10 and not good["problems"]
    bad = detect_summary("infiniband", h100_node(tmp_path / "b", down=("mlx5_2",)), "InfiniBand", None)
    assert bad["problems"] == ["mlx5_2:1 is DOWN"]
    none = detect_summary("auto", str(tmp_path / "none"), None, None)
    assert none["fabric"] == "ethernet" and "falling back to TCP sockets" in none["warnings"][0]


def test_nodes_that_disagree_are_named():
    base = {
        "fabric": "infiniband",
        "ports": [f"mlx5_{i}:1" for i in range(8)],
        "rate_gbps": 400,
        "problems": [],
    }
    summaries = {
        "n1": dict(base),
        "n2": dict(base),
        "n3": dict(base, ports=base["ports"][:7]),
        "n4": dict(base, rate_gbps=200),
        "n5": dict(base, problems=["mlx5_0:1 is DOWN"]),
        "n6": dict(base, fabric="ethernet", ports=[]),
    }
    bad = nccl.compare_nodes(summaries)
    assert set(bad) == {"n3", "n4", "n5", "n6"}
    assert "7 ACTIVE HCA ports while the other nodes have 8" in bad["n3"]
    assert "mlx5_0:1 is DOWN" in bad["n5"]
    assert nccl.compare_nodes({"n1": base, "n2": base}) == {}


def test_socket_ifname_picks_interface_holding_node_address():
    ifs = {"lo": ["127.0.0.1"], "eth0": ["10.77.0.12"], "docker0": ["172.17.0.1"]}
    assert nccl.pick_socket_ifname(["10.77.0.12"], ifs) == ("eth0", None)
    name, warning = nccl.pick_socket_ifname(["127.0.1.1"], ifs)
    assert name == "docker0" and "no interface holds" in warning
    assert nccl.pick_socket_ifname([], {"lo": ["127.0.0.1"]})[0] is None


@pytest.mark.parametrize("addresses", [["127.0.0.1"], ["127.0.1.1", "127.0.0.1"], ["::1"]])
def test_socket_ifname_never_picks_loopback_even_when_it_holds_the_node_address(addresses):
    """A node whose name resolves to 127.0.0.1 finds that address on ``lo``; choosing it
    would give NCCL_SOCKET_IFNAME=lo and a multi-node hang. Fall back to a real interface."""
    ifs = {"lo": ["127.0.0.1", "::1"], "eth0": ["10.77.0.12"]}
    name, warning = nccl.pick_socket_ifname(addresses, ifs)
    assert name == "eth0" and "no interface holds" in warning
    assert nccl.pick_socket_ifname(addresses, {"lo": ["127.0.0.1", "::1"]})[0] is None


def test_profiles_are_data_with_source_material_values():
    ib = nccl.load_profile("infiniband")
    assert ib["env"]["NCCL_IB_TIMEOUT"] == "22" and ib["hca"] == "auto" and ib["socket_ifname"] == "ib0"
    assert ib["min_nchannels_8gpu"] == 16
    assert nccl.load_profile("roce")["env"]["NCCL_IB_GID_INDEX"] == "3"
    with pytest.raises(ConfigError, match="available: ethernet, infiniband, none, roce"):
        nccl.load_profile("myrinet")


def test_resolve_nccl_overrides_and_runtime():
    spec = validate_spec(
        {
            "script": "/t",
            "fabric": "infiniband",
            "gpus_per_node": 4,
            "nccl": {"ib_timeout": 20, "debug": "WARN", "env": {"NCCL_ALGO": "Ring"}},
        }
    )
    r = nccl.resolve_nccl(spec)
    assert r["env"]["NCCL_IB_TIMEOUT"] == "20" and r["env"]["NCCL_DEBUG"] == "WARN"
    assert r["env"]["NCCL_ALGO"] == "Ring" and "NCCL_MIN_NCHANNELS" not in r["env"]  # < 8 GPUs
    assert r["runtime"]["hca"] == "auto"
    auto = nccl.resolve_nccl(validate_spec({"script": "/t"}))
    assert auto["profile"] == "auto" and auto["runtime"]["socket_ifname"] == "auto" and auto["env"] == {}
    none = nccl.resolve_nccl(validate_spec({"script": "/t", "fabric": "none"}))
    assert none["env"] == {} and none["runtime"]["hca"] is None
