"""Fast host checks (disk, memory, mounts, InfiniBand, services) and the cached heavy verdicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from slurmkit.health.catalog import CATALOG
from slurmkit.health.engine import run_one
from slurmkit.hw import ib_ports
from slurmkit.verdict.base import Action, CheckResult, Status
from slurmkit.verdict.store import VerdictStore


def run(ctx, name, timeout=2.0):
    return run_one(ctx, CATALOG[name], timeout)


def test_disk_space_good_and_fail(ctx_factory, tmp_path):
    ok = run(
        ctx_factory(health={"checks": {"disk_space": {"paths": {str(tmp_path): {"min_free_gb": 0.001}}}}}),
        "disk_space",
    )
    assert ok.status == Status.OK and ok.value > 0
    # tmp_path lies under /tmp, which users can fill: say it is root-only to see the FAIL
    root_only = {"min_free_gb": 1e9, "user_fillable": False}
    bad = run(
        ctx_factory(health={"checks": {"disk_space": {"paths": {str(tmp_path): root_only}}}}),
        "disk_space",
    )
    assert bad.status == Status.FAIL and bad.code == "DISK_FREE_LOW" and str(tmp_path) in bad.reason
    inodes_cfg = {"checks": {"disk_space": {"paths": {str(tmp_path): {"min_free_inodes_pct": 101}}}}}
    inodes = run(ctx_factory(health=inodes_cfg), "disk_space")
    assert inodes.code == "DISK_INODES_LOW"
    missing = run(
        ctx_factory(health={"checks": {"disk_space": {"paths": {"/nonexistent/scratch": {}}}}}), "disk_space"
    )
    assert missing.code == "DISK_PATH_MISSING"


class _Full:
    """statvfs of a filesystem with no free block and no free inode."""

    f_frsize = 4096
    f_bavail = 0
    f_files = 1000
    f_favail = 0


@pytest.fixture
def full_fs(monkeypatch):
    real = os.statvfs
    full = set()
    monkeypatch.setattr(os, "statvfs", lambda p: _Full() if str(p) in full else real(p))
    return full


def test_user_fillable_is_decided_by_mode_and_owner(tmp_path):
    from slurmkit.health.checks.host import user_fillable

    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    assert "writable by others (mode 1777)" in user_fillable(str(sticky))
    (sticky / "roots").mkdir(mode=0o755)  # root's, but on a filesystem users fill through its parent
    assert str(sticky) in user_fillable(str(sticky / "roots"))
    group = tmp_path / "group"
    group.mkdir()
    os.chmod(group, 0o775)
    assert "writable by its group" in user_fillable(str(group))
    assert user_fillable("/proc") is None  # root's 0555, a filesystem of its own
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        assert "uid 65534" in user_fillable(str(theirs))


def test_a_full_user_fillable_path_warns_and_a_root_only_one_fails(ctx_factory, tmp_path, full_fs):
    """Issue 25: any user could fill /tmp and drain the node. Now a user-fillable path that
    is full (space or inodes) or gone is a WARN; a root-only one still FAILs, and a site can
    ask for the old FAIL."""
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    full_fs.update({str(sticky), "/proc"})
    limits = {"min_free_gb": 1.0, "min_free_inodes_pct": 1.0}

    def check(paths, **extra):
        return run(ctx_factory(health={"checks": {"disk_space": {"paths": paths, **extra}}}), "disk_space")

    r = check({str(sticky): limits})
    assert r.status == Status.WARN and r.code == "DISK_FREE_LOW" and "not draining" in r.reason, r
    assert r.details[str(sticky)]["user_fillable"] is True
    r = check({str(sticky): {"min_free_inodes_pct": 1.0}})
    assert r.status == Status.WARN and r.code == "DISK_INODES_LOW"
    assert check({str(sticky): limits}, fail_when_user_fillable=True).status == Status.FAIL
    assert check({str(sticky): dict(limits, user_fillable=False)}).status == Status.FAIL
    root_only = check({"/proc": limits})
    assert root_only.status == Status.FAIL and root_only.code == "DISK_FREE_LOW"
    both = check({str(sticky): limits, "/proc": limits})
    assert both.status == Status.FAIL and "/proc" in both.reason and str(sticky) not in both.reason
    # a path a user can remove (it sat in their sticky tree): gone is a warning too
    gone = check({str(sticky / "scratch"): {}})
    assert gone.status == Status.WARN and gone.code == "DISK_PATH_MISSING"


def test_memory_available(ctx_factory):
    assert (
        run(
            ctx_factory(health={"checks": {"memory_available": {"min_available_gb": 0.01}}}),
            "memory_available",
        ).status
        == Status.OK
    )
    r = run(
        ctx_factory(health={"checks": {"memory_available": {"min_available_gb": 1e6}}}), "memory_available"
    )
    assert r.status == Status.FAIL and r.code == "MEMORY_LOW"


def test_mounts(ctx_factory, tmp_path):
    assert run(ctx_factory(health={"checks": {"mounts": {"required": ["/"]}}}), "mounts").status == Status.OK
    r = run(
        ctx_factory(health={"checks": {"mounts": {"required": [str(tmp_path / "not-a-mount")]}}}), "mounts"
    )
    assert r.code == "MOUNT_MISSING"


def test_mounts_read_only_and_writable(tmp_path):
    """Builds the mounts it judges (two tmpfs, one read-only) in a private mount namespace,
    so the read-only case runs on every host and nothing leaks into the machine's mounts."""
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    code = (
        "import json, sys\n"
        "from slurmkit.health.checks.host import check_mounts\n"
        "print(json.dumps([check_mounts(None, {'required': [p]}).code for p in sys.argv[1:]]))\n"
    )
    setup = (
        'set -e; mkdir -p "$1" "$2"; mount -t tmpfs -o ro,size=64k slurmkit-ro "$1"; '
        'mount -t tmpfs -o size=64k slurmkit-rw "$2"; exec "$3" -c "$4" "$1" "$2"'
    )
    userns = [] if os.geteuid() == 0 else ["--map-root-user"]
    res = subprocess.run(
        [
            "unshare",
            "--mount",
            *userns,
            "--",
            "sh",
            "-c",
            setup,
            "sh",
            str(ro),
            str(rw),
            sys.executable,
            code,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == ["MOUNT_READONLY", "OK"]


def make_ib_tree(root, ports):
    """ports: {(hca, port): (state, rate, link_layer)}"""
    for (hca, port), (state, rate, layer) in ports.items():
        d = root / "class" / "infiniband" / hca / "ports" / str(port)
        d.mkdir(parents=True)
        (d / "state").write_text(state + "\n")
        (d / "rate").write_text(rate + "\n")
        (d / "link_layer").write_text(layer + "\n")
    return root


def test_ib_ports_parse_and_active_ports(tmp_path):
    root = make_ib_tree(
        tmp_path / "sys",
        {
            ("mlx5_0", 1): ("4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand"),
            ("mlx5_1", 1): ("1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand"),
            ("mlx5_10", 1): ("4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand"),
            ("mlx5_bond_0", 1): ("4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet"),
        },
    )
    ports = ib_ports(str(root))
    assert [(p.device, p.state, p.rate_gbps) for p in ports] == [
        ("mlx5_0", "ACTIVE", 400.0),
        ("mlx5_1", "DOWN", 10.0),
        ("mlx5_10", "ACTIVE", 200.0),
        ("mlx5_bond_0", "ACTIVE", 100.0),
    ]
    assert ib_ports(str(tmp_path / "empty")) == []


def test_infiniband_check(ctx_factory, tmp_path):
    root = make_ib_tree(
        tmp_path / "sys",
        {
            ("mlx5_0", 1): ("4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand"),
            ("mlx5_1", 1): ("4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand"),
        },
    )
    base = {"sysfs_root": str(root)}
    assert run(ctx_factory(health={"checks": {"infiniband": base}}), "infiniband").status == Status.OK
    r = run(ctx_factory(health={"checks": {"infiniband": dict(base, expected_rate_gbps=400)}}), "infiniband")
    assert r.code == "IB_RATE_LOW" and "mlx5_1:1" in r.reason
    r = run(ctx_factory(health={"checks": {"infiniband": dict(base, min_active_ports=4)}}), "infiniband")
    assert r.code == "IB_TOO_FEW_PORTS"
    (root / "class/infiniband/mlx5_1/ports/1/state").write_text("1: DOWN\n")
    r = run(ctx_factory(health={"checks": {"infiniband": base}}), "infiniband")
    assert r.status == Status.FAIL and r.code == "IB_PORT_DOWN"
    none = {"sysfs_root": str(tmp_path / "nothing")}
    assert run(ctx_factory(health={"checks": {"infiniband": none}}), "infiniband").status == Status.OK
    r = run(ctx_factory(health={"checks": {"infiniband": dict(none, min_active_ports=1)}}), "infiniband")
    assert r.code == "IB_TOO_FEW_PORTS"


def test_services(ctx_factory):
    me = open("/proc/self/comm").read().strip()
    assert (
        run(ctx_factory(health={"checks": {"services": {"required": [me]}}}), "services").status == Status.OK
    )
    r = run(ctx_factory(health={"checks": {"services": {"required": ["nv-fabricmanager"]}}}), "services")
    assert r.status == Status.FAIL and r.code == "SERVICE_DOWN" and "nv-fabricmanager" in r.reason


def test_heavy_cache_reports_valid_verdicts_and_fails_on_a_valid_fail(ctx_factory, tmp_path):
    store = VerdictStore(str(tmp_path / "shared"))
    r = run(ctx_factory(), "heavy_cache")
    assert r.status == Status.OK and r.value == 0
    store.record("node1", [CheckResult("nvlink_bandwidth", Status.OK, value=390.0, unit="GB/s")], 3600)
    r = run(ctx_factory(), "heavy_cache")
    assert r.status == Status.OK and "nvlink_bandwidth" in r.reason and r.value == 1
    store.record(
        "node1",
        [
            CheckResult(
                "gemm_tflops", Status.FAIL, "GEMM_TFLOPS_LOW", "gpu3: 400 < 550", Action.RESET, value=400.0
            )
        ],
        3600,
    )
    r = run(ctx_factory(), "heavy_cache")
    assert (r.status, r.code, r.action) == (Status.FAIL, "GEMM_TFLOPS_LOW", Action.RESET)
    assert "gemm_tflops (sweep" in r.reason
    # an expired failure is ignored: the prolog does not fail on stale news
    store.record(
        "node1",
        [CheckResult("gemm_tflops", Status.FAIL, "GEMM_TFLOPS_LOW", "old", timestamp=time.time() - 7200)],
        3600,
    )
    assert run(ctx_factory(), "heavy_cache").status == Status.OK
    assert (
        run(ctx_factory(health={"use_verdict_store": False}), "heavy_cache").reason
        == "verdict store disabled"
    )


@pytest.mark.parametrize(
    "name,target,health",
    [
        ("disk_space", "os.statvfs", {}),
        ("memory_available", "slurmkit.health.checks.host.meminfo", {}),
        ("mounts", "slurmkit.health.checks.host._mount_table", {"checks": {"mounts": {"required": ["/"]}}}),
        ("infiniband", "slurmkit.hw.ib_ports", {}),
        (
            "services",
            "slurmkit.health.checks.host.running_process_names",
            {"checks": {"services": {"required": ["x"]}}},
        ),
    ],
)
def test_a_hung_host_probe_fails_naming_the_check(ctx_factory, monkeypatch, name, target, health):
    """A stuck NFS statvfs or /proc read must not hang the prolog: the check fails at its deadline."""
    monkeypatch.setattr(target, lambda *a, **k: time.sleep(30))
    t0 = time.monotonic()
    r = run(ctx_factory(health=health), name, timeout=0.3)
    assert time.monotonic() - t0 < 1.5
    assert (r.status, r.code, r.action) == (Status.FAIL, "CHECK_TIMEOUT", Action.ISOLATE)
    assert name in r.reason
