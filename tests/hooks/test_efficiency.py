"""Per-job GPU efficiency in the epilog: the summary maths, the
collection against the simulated backend (accounting per GPU and pid, cursor, mode off,
a hung query), the multi-node merge on a shared directory, and the whole epilog with a
fake ``scontrol`` that records the AdminComment update (Slurm itself: the devcluster
tests in tests/integration/test_efficiency_devcluster.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurmkit.health.backends import AccountingStats
from slurmkit.health.backends.simulated import SimulatedBackend
from slurmkit.hooks import efficiency as eff
from slurmkit.slurm import admincomment
from tests.health.conftest import REPO

EPILOG = str(REPO / "epilog" / "slurmkit-epilog")


def acc(pid, util, time_s, start, mem=1000.0, running=False):
    return AccountingStats(
        pid=pid, gpu_util=util, max_memory_mib=mem, time_s=time_s, start_time=start, running=running
    )


# ---------------------------------------------------------------- maths


def test_summary_of_one_gpu_weights_utilisation_by_time_and_unions_lifetimes():
    # two processes: 100 s at 90 % (t=0..100) and 50 s at 10 % overlapping (t=50..100)
    s = eff.summarize_gpu([acc(1, 90, 100, 1000.0, 60000), acc(2, 10, 50, 1050.0, 2000)], 81559, now=2000)
    assert s["p"] == 2 and s["t"] == 100.0  # union, not 150
    assert s["b"] == pytest.approx(0.9 * 100 + 0.1 * 50)
    assert s["u"] == pytest.approx(95.0)  # busy 95 s over 100 s active
    assert s["m"] == 60000 and s["c"] == 81559
    idle = eff.summarize_gpu([], 81559, now=0)
    assert idle == {"p": 0, "t": 0.0, "c": 81559, "u": 0.0, "b": 0.0, "m": 0}


def test_summary_ignores_nan_and_unknown_utilisation():
    s = eff.summarize_gpu([acc(1, float("nan"), 10, 5.0, float("inf"))], 100, now=20)
    assert s["u"] is None and s["b"] is None and s["m"] is None and s["p"] == 1
    running = eff.summarize_gpu([acc(1, 50, 0, 100.0, running=True)], 100, now=110)
    assert running["t"] == 10.0 and running["b"] == 5.0


# ---------------------------------------------------------------- collection (simulated backend)


def sim(tmp_path, gpus):
    import yaml

    path = tmp_path / "fx.yaml"
    path.write_text(yaml.safe_dump({"defaults": {"accounting_mode": True}, "gpus": gpus}))
    return SimulatedBackend(str(path))


def test_collect_counts_only_processes_after_the_cursor_and_reports_mode_off(tmp_path):
    backend = sim(
        tmp_path,
        [
            {
                "index": 0,
                "accounting": [
                    {
                        "pid": 10,
                        "gpu_util": 99,
                        "max_memory_mib": 9,
                        "time_ms": 5000,
                        "start_time": 100.0,
                    },  # old job
                    {
                        "pid": 20,
                        "gpu_util": 40,
                        "max_memory_mib": 70000,
                        "time_ms": 100000,
                        "start_time": 500.0,
                    },
                ],
            },
            {"index": 1, "accounting_mode": False},
            {"index": 2, "accounting_mode": "unsupported"},
            {"index": 3},
        ],
    )
    box = {}
    eff.collect(backend, [0, 1, 2, 3], cursor={"0": 100.0}, job_start=None, job_pids=[], now=1000.0, box=box)
    g = box["gpus"]
    assert g["0"]["p"] == 1 and g["0"]["u"] == 40.0 and g["0"]["m"] == 70000 and g["0"]["t"] == 100.0
    assert [p["pid"] for p in box["processes"]["0"]] == [20]
    assert g["1"] == {"a": "off", "c": 81559} and g["2"]["a"] == "unsupported"
    assert g["3"]["p"] == 0 and g["3"]["u"] == 0.0  # accounting on, nothing ran: a known idle GPU
    assert box["newest"] == {"0": 500.0}
    assert eff.node_state(g) == "off"
    # the job's own pid counts even when it started before the cursor; SLURM_JOB_START_TIME filters too
    box = {}
    eff.collect(backend, [0], cursor={"0": 600.0}, job_start=None, job_pids=[20], now=1000.0, box=box)
    assert box["gpus"]["0"]["p"] == 1
    box = {}
    eff.collect(backend, [0], cursor={}, job_start=400.0, job_pids=[], now=1000.0, box=box)
    assert [p["pid"] for p in box["processes"]["0"]] == [20]


def test_cursor_round_trip(tmp_path):
    eff.advance_cursor(str(tmp_path), "node1", {"0": 5.0, "3": 7.0}, timeout=1)
    eff.advance_cursor(str(tmp_path), "node1", {"0": 4.0}, timeout=1)  # never goes back
    assert eff.read_cursor(str(tmp_path), "node1") == {"0": 5.0, "3": 7.0}


# ---------------------------------------------------------------- multi-node merge


def test_last_node_merges_once_and_an_open_directory_is_refused(tmp_path):
    shared = tmp_path / "shared"
    nodes = ["node1", "node2"]
    far = time.monotonic() + 10
    box = {}
    assert (
        eff.share_and_merge(str(shared), "55", "node2", nodes, {"acct": "on", "gpus": {"0": {}}}, 5, far, box)
        is None
    )
    assert "waiting for node1" in box["merge"]
    t0 = time.monotonic()
    merged, missing = eff.share_and_merge(
        str(shared), "55", "node1", nodes, {"acct": "on", "gpus": {}}, 5, far, {}
    )
    assert time.monotonic() - t0 < 1.0  # everything was there: no waiting
    assert sorted(merged) == nodes and missing == []
    assert eff.share_and_merge(str(shared), "55", "node2", nodes, {}, 0, far, box) is None
    assert box["merge"] == "another node merged"
    # the first node waits merge_wait, then writes what it has
    t0 = time.monotonic()
    merged, missing = eff.share_and_merge(str(shared), "56", "node1", nodes, {"acct": "on"}, 0.5, far, {})
    assert 0.4 < time.monotonic() - t0 < 3 and missing == ["node2"] and list(merged) == ["node1"]
    # a directory others can write is not trusted
    os.chmod(shared / "efficiency", 0o777)
    with pytest.raises(PermissionError):
        eff.share_and_merge(str(shared), "57", "node1", nodes, {}, 0, far, {})


def test_a_summary_file_written_by_someone_else_is_ignored(tmp_path):
    shared = tmp_path / "shared"
    far = time.monotonic() + 10
    eff.share_and_merge(str(shared), "60", "node2", ["node1", "node2"], {"acct": "on"}, 0, far, {})
    forged = shared / "efficiency" / "60" / "node2.json"
    os.chown(forged, 65534, 65534)  # not root's: a planted file
    merged, missing = eff.share_and_merge(
        str(shared), "60", "node1", ["node1", "node2"], {"acct": "on"}, 0.3, far, {}
    )
    assert missing == ["node2"] and list(merged) == ["node1"]


# ---------------------------------------------------------------- the whole epilog


pytestmark_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the epilog's checks)")


def run_epilog(config, env_extra=None, timeout=60):
    env = {
        "SLURMKIT_CONFIG": str(config),
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_UID": "65534",
        "SLURM_JOB_USER": "nobody",
        "SLURM_JOB_GPUS": "0,1",
        "SLURM_NODELIST": "node1",
    }
    env.update(env_extra or {})
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, EPILOG], env=env, capture_output=True, text=True, timeout=timeout)
    return res, time.monotonic() - t0


def epilog_record(tmp_path):
    lines = (tmp_path / "log" / "health.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if json.loads(x)["hook"] == "epilog"][-1]


@pytest.fixture
def fake_acct(fake_scontrol, tmp_path):
    """``sacct`` and ``sacctmgr`` next to the fake ``scontrol``: sacctmgr records its argv and
    stores the AdminComment lower-cased (as Slurm 22.05 does); sacct prints it back."""
    store = tmp_path / "admin-comment.txt"
    calls = tmp_path / "acct-calls.jsonl"
    bindir = fake_scontrol.bin_dir
    for name, body in (
        (
            "sacctmgr",
            f"""
with open({str(calls)!r}, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
value = [a for a in sys.argv if a.startswith("AdminComment=")][0].split("=", 1)[1]
open({str(store)!r}, "w").write(value.lower())
print(" Modified jobs...")
""",
        ),
        (
            "sacct",
            f"""
print(open({str(store)!r}).read() if os.path.exists({str(store)!r}) else "")
""",
        ),
    ):
        path = os.path.join(bindir, name)
        with open(path, "w") as fh:
            fh.write(f"#!{sys.executable}\nimport json, os, sys\n" + body)
        os.chmod(path, 0o755)

    class Acct:
        def updates(self):
            if not calls.exists():
                return []
            return [json.loads(x) for x in calls.read_text().splitlines()]

        def summary(self, ref="4242"):
            upd = [c for c in self.updates() if f"jobid={ref}" in c]
            assert len(upd) == 1, upd
            assert upd[0][:5] == ["-i", "update", "job", "where", f"jobid={ref}"] and upd[0][5] == "set"
            return admincomment.decode(upd[0][6][len("AdminComment=") :])

        def set(self, text):
            store.write_text(text)

        def reset(self):
            calls.unlink(missing_ok=True)
            store.unlink(missing_ok=True)

    return Acct()


@pytestmark_root
def test_epilog_writes_one_admin_comment_and_logs_the_detail(
    gpu_fixture, site, fake_scontrol, fake_acct, tmp_path
):
    now = time.time()

    def mutate(d):
        d["gpus"][0]["accounting"] = [
            {
                "pid": 999999,
                "gpu_util": 80,
                "mem_util": 30,
                "max_memory_mib": 60000,
                "time_ms": 120000,
                "start_time": now - 130,
            }
        ]

    gpu_fixture(mutate)
    cfg = site(
        health={"clean_dev_shm": False, "memory_release_wait": 0.1}, slurm={"bin_dir": fake_scontrol.bin_dir}
    )
    res, _ = run_epilog(cfg)
    assert res.returncode == 0, res.stderr
    summary = fake_acct.summary()
    g = summary["nodes"]["node1"]["gpus"]
    assert summary["job"] == "4242" and summary["nodes"]["node1"]["acct"] == "on"
    assert g["0"]["u"] == 80.0 and g["0"]["t"] == 120.0 and g["0"]["m"] == 60000 and g["0"]["p"] == 1
    assert g["1"]["p"] == 0 and g["1"]["u"] == 0.0
    rec = epilog_record(tmp_path)
    assert rec["efficiency"]["accounting"] == "on" and rec["efficiency"]["admin_comment"]["written"] is True
    assert rec["efficiency"]["processes"]["0"][0]["pid"] == 999999
    # the next job on the same GPUs does not see this job's process again (cursor)
    fake_acct.reset()
    res, _ = run_epilog(cfg, {"SLURM_JOB_ID": "4243"})
    assert fake_acct.summary("4243")["nodes"]["node1"]["gpus"]["0"]["p"] == 0
    # another tool's AdminComment is never overwritten (sacctmgr would replace and lower-case it)
    fake_acct.reset()
    fake_acct.set("JS1:H4sIAbc")
    res, _ = run_epilog(cfg, {"SLURM_JOB_ID": "4244"})
    assert res.returncode == 0 and fake_acct.updates() == []
    assert "another tool" in epilog_record(tmp_path)["efficiency"]["admin_comment"]["skipped"]
    # an array task is addressed as <array job>_<task>
    fake_acct.reset()
    run_epilog(cfg, {"SLURM_JOB_ID": "4245", "SLURM_ARRAY_JOB_ID": "4245", "SLURM_ARRAY_TASK_ID": "3"})
    assert fake_acct.summary("4245_3")["job"] == "4245"


@pytestmark_root
def test_accounting_off_is_recorded_not_zero(gpu_fixture, site, fake_scontrol, fake_acct, tmp_path):
    gpu_fixture(lambda d: d.update(defaults={"accounting_mode": False}))
    res, _ = run_epilog(site(health={"clean_dev_shm": False}, slurm={"bin_dir": fake_scontrol.bin_dir}))
    assert res.returncode == 0, res.stderr
    node = fake_acct.summary()["nodes"]["node1"]
    assert node["acct"] == "off" and node["gpus"]["0"] == {"a": "off", "c": 81559}
    assert "u" not in node["gpus"]["1"]


@pytestmark_root
def test_hung_accounting_query_is_bounded_and_recorded(gpu_fixture, site, fake_scontrol, fake_acct, tmp_path):
    gpu_fixture(
        lambda d: (
            d.update(
                inject={"hang": {"call": "accounting_stats", "seconds": 60}},
                defaults={"accounting_mode": True},
            )
            or d["gpus"][0].update(
                accounting=[{"pid": 1, "gpu_util": 1, "time_ms": 1, "start_time": time.time()}]
            )
        )
    )
    cfg = site(
        health={"clean_dev_shm": False, "memory_release_wait": 0.1, "efficiency": {"timeout": 2.0}},
        slurm={"bin_dir": fake_scontrol.bin_dir},
    )
    res, took = run_epilog(cfg)
    assert res.returncode == 0, res.stderr
    assert took < 8.0  # 1 s collecting, then on; never the 60 s hang
    rec = epilog_record(tmp_path)
    assert rec["efficiency"]["status"] == "timeout" and "accounting_stats GPU 0" in rec["efficiency"]["error"]
    summary = fake_acct.summary()
    assert summary["nodes"]["node1"]["acct"] == "timeout"
    assert summary["nodes"]["node1"]["gpus"]["1"] == {"a": "timeout"}


def test_epilog_step_never_raises_and_skips_jobs_without_gpus(ctx_factory):
    ctx = ctx_factory(hook="epilog", env={"SLURM_JOB_ID": "5"})
    extra = {}
    eff.epilog_step(ctx, time.monotonic() + 5, extra)
    assert extra == {}  # no GPUs: nothing to say
    ctx = ctx_factory(hook="epilog", env={"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "0"})
    ctx.backend = lambda: (_ for _ in ()).throw(RuntimeError("boom"))
    ctx.paths = {"state_dir": "/nonexistent/x", "shared_dir": "/nonexistent/y"}
    ctx.health = dict(ctx.health, efficiency={"enabled": True, "timeout": 1.0, "admin_comment": False})
    eff.epilog_step(ctx, time.monotonic() + 5, extra)
    assert extra["efficiency"]["status"] == "error" and "boom" in extra["efficiency"]["error"]
    assert extra["efficiency"]["gpus"] == {"0": {"a": "error"}}


# ---------------------------------------------------------------- NVML mapping (fake pynvml)


def test_nvml_accounting_parsing_and_errors(monkeypatch):
    from tests.health.test_nvml_backend import _Err, fake_pynvml

    m = fake_pynvml()
    m.NVML_FEATURE_DISABLED = 0
    m.NVML_ERROR_NOT_FOUND = 6
    na32, na64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
    stats = {
        (1, 10): SimpleNamespace(
            gpuUtilization=75,
            memoryUtilization=na32,
            maxMemoryUsage=2 * 2**30,
            time=90000,
            startTime=1_764_400_000_000_000,
            isRunning=0,
        ),
        (1, 11): SimpleNamespace(
            gpuUtilization=na32,
            memoryUtilization=1,
            maxMemoryUsage=na64,
            time=na64,
            startTime=na64,
            isRunning=1,
        ),
    }
    m.nvmlDeviceGetAccountingMode = lambda h: 1 if h["minor"] == 1 else (_ for _ in ()).throw(_Err(3))
    m.nvmlDeviceGetAccountingPids = lambda h: [10, 11, 12]

    def get_stats(h, pid):
        if (h["minor"], pid) not in stats:
            raise _Err(6)  # NOT_FOUND: dropped from the circular buffer
        return stats[(h["minor"], pid)]

    m.nvmlDeviceGetAccountingStats = get_stats
    set_calls = []
    m.nvmlDeviceSetAccountingMode = lambda h, flag: set_calls.append((h["minor"], flag))
    monkeypatch.setitem(sys.modules, "pynvml", m)
    from slurmkit.health.backends.nvml import NvmlBackend

    b = NvmlBackend()
    assert b.accounting_mode(1) is True and b.accounting_mode(0) is None  # NOT_SUPPORTED
    assert b.accounting_pids(1) == [10, 11, 12]
    s = b.accounting_stats(1, 10)
    assert (s.gpu_util, s.mem_util, s.max_memory_mib, s.time_s, s.start_time, s.running) == (
        75.0,
        None,
        2048.0,
        90.0,
        1_764_400_000.0,
        False,
    )
    s = b.accounting_stats(1, 11)
    assert s.gpu_util is None and s.max_memory_mib is None and s.time_s is None and s.running is True
    assert b.accounting_stats(1, 12) is None
    b.set_accounting_mode(1, True)
    assert set_calls == [(1, 1)]


def test_health_accounting_command_shows_and_enables(gpu_fixture, site, tmp_path):
    gpu_fixture(
        lambda d: (
            d.update(defaults={"accounting_mode": False})
            or d["gpus"][7].update(accounting_mode="unsupported")
        )
    )
    cfg = str(site())
    cmd = [
        sys.executable,
        "-m",
        "slurmkit.cli.main",
        "health",
        "accounting",
        "--node",
        "node1",
        "--config",
        cfg,
    ]
    res = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr
    assert [g["accounting"] for g in json.loads(res.stdout)["gpus"]] == ["off"] * 7 + ["unsupported"]
    res = subprocess.run([*cmd, "--enable", "--json"], capture_output=True, text=True, timeout=60)
    rows = json.loads(res.stdout)["gpus"]
    assert [g["accounting"] for g in rows] == ["on"] * 7 + ["unsupported"] and rows[0]["changed"] is True
    assert res.returncode == 1  # GPU 7 cannot
    denied = {"nvml_error": {"call": "set_accounting_mode", "error": "NO_PERMISSION"}}
    gpu_fixture(lambda d: d.update(inject=denied, defaults={"accounting_mode": False}))
    res = subprocess.run([*cmd, "--enable"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 3 and "NVML_ERROR_NO_PERMISSION" in res.stdout


def test_hostile_node_names_and_stale_directories(tmp_path):
    far = time.monotonic() + 10
    with pytest.raises(ValueError):
        eff.share_and_merge(str(tmp_path), "61", "node1", ["node1", "../../etc"], {}, 0, far, {})
    assert eff.job_nodes({"SLURM_NODELIST": "node[1-2]"}, "node2") == ["node1", "node2"]
    assert eff.job_nodes({"SLURM_NODELIST": "node[1-"}, "node2") == ["node2"]  # unparsable: alone
    base = tmp_path / "efficiency"
    eff.share_and_merge(str(tmp_path), "62", "node1", ["node1"], {}, 0, far, {})
    old = base / "62"
    os.utime(old, (time.time() - 8 * 86400,) * 2)
    (base / "notajob").mkdir()
    os.utime(base / "notajob", (time.time() - 8 * 86400,) * 2)
    assert eff.prune(str(base)) == 1 and not old.exists() and (base / "notajob").exists()


def test_one_gpu_error_leaves_the_others_measured(tmp_path):
    import yaml

    path = tmp_path / "fx.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"accounting_mode": True},
                "inject": {"nvml_error": {"call": "accounting_pids", "gpu": 1, "error": "UNKNOWN"}},
                "gpus": [{"index": 0}, {"index": 1}],
            }
        )
    )
    box = {}
    eff.collect(SimulatedBackend(str(path)), [0, 1], cursor={}, job_start=None, job_pids=[], now=1.0, box=box)
    assert box["gpus"]["0"]["p"] == 0 and box["gpus"]["1"] == {"a": "error", "c": 81559}
    assert "NVML_ERROR_UNKNOWN" in box["errors"]["1"]


def test_admin_comment_write_retries_until_slurmdbd_has_the_job_and_is_bounded():
    from slurmkit.slurm import runner

    calls = []
    answers = {"sacctmgr": ["Nothing modified\n", " Modified jobs...\n"]}

    def fake(argv, timeout, input, env):
        name = os.path.basename(argv[0])
        calls.append((name, list(argv[1:]), timeout))
        if name == "sacct":
            return runner.Result(list(argv), 0, "\n", "", 0.01)
        return runner.Result(
            list(argv),
            0,
            answers["sacctmgr"].pop(0) if answers["sacctmgr"] else "Nothing modified\n",
            "",
            0.01,
        )

    prev = runner.set_runner(fake)
    try:
        assert eff.write_admin_comment("77_3", "sk1:00", timeout=3.0, retry_wait=0.1) == "sk1:00"
        assert [c[0] for c in calls] == ["sacct", "sacctmgr", "sacctmgr"]
        assert calls[1][1] == ["-i", "update", "job", "where", "jobid=77_3", "set", "AdminComment=sk1:00"]
        assert all(c[2] <= 3.0 for c in calls)
        calls.clear()
        t0 = time.monotonic()
        with pytest.raises(eff.CommentNotWritten, match="not in the accounting database"):
            eff.write_admin_comment("78", "sk1:00", timeout=1.0, retry_wait=0.2)
        assert time.monotonic() - t0 < 1.5 and len(calls) >= 2
    finally:
        runner.set_runner(prev)


# ---------------------------------------------------------------- job start, array tasks, attempts


def test_collect_counts_only_the_jobs_uid_and_processes_after_the_job_start(tmp_path):
    """Another user's process (live, by its /proc owner) and anything older than the job's
    start never enter the summary, even when their pid is among the job's pids."""
    now = 10_000.0
    acct = [
        {"pid": 11, "gpu_util": 90, "time_ms": 100_000, "start_time": 5_000.0},  # the job's
        {"pid": 12, "gpu_util": 10, "time_ms": 900_000, "start_time": 4_000.0},  # before the job
        {"pid": 13, "gpu_util": 50, "time_ms": 100_000, "start_time": 5_100.0},  # another user's, live
        {"pid": 14, "gpu_util": 50, "time_ms": 100_000, "start_time": 4_999.5},  # inside the 1 s slack
    ]
    backend = sim(tmp_path, [{"index": 0, "accounting": acct}])
    owners = {11: 500, 12: None, 13: 777, 14: None}
    box: dict = {}
    eff.collect(
        backend,
        [0],
        cursor={},
        job_start=5_000.0,
        job_pids=[12, 13],
        now=now,
        box=box,
        job_uid=500,
        owner_uid=lambda pid, start: owners[pid],
    )
    assert [p["pid"] for p in box["processes"]["0"]] == [11, 14]
    assert box["excluded"]["0"] == {"before_job": 1, "other_user": 1}


def _accounting(**by_gpu):
    def mutate(d):
        for gpu, entries in by_gpu.items():
            d["gpus"][int(gpu[1:])]["accounting"] = entries

    return mutate


@pytestmark_root
def test_array_tasks_keep_their_own_summary_and_another_users_process_stays_out(
    gpu_fixture, site, fake_scontrol, fake_acct, tmp_path
):
    """Slurm 22.05's epilog has neither SLURM_JOB_START_TIME nor the array ids: they come
    from ``scontrol show job``. Failed before: both tasks wrote ``jobid=<array job>`` (the
    last one's summary on every task) and the other user's and the older process counted."""
    other = subprocess.Popen(["/bin/sleep", "60"], user=12345)
    try:
        from slurmkit.hooks import procs

        deadline = time.monotonic() + 5
        while procs.read_proc(other.pid).comm != "sleep":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        btime = next(float(x.split()[1]) for x in open("/proc/stat") if x.startswith("btime "))
        other_start = btime + procs.read_proc(other.pid).start / os.sysconf("SC_CLK_TCK")
        job_start = int(other_start) - 30
        gpu_fixture(
            _accounting(
                g0=[
                    {"pid": 999901, "gpu_util": 80, "time_ms": 20_000, "start_time": job_start + 5},
                    {"pid": 999902, "gpu_util": 5, "time_ms": 500_000, "start_time": job_start - 600},
                    {
                        "pid": other.pid,
                        "gpu_util": 99,
                        "time_ms": 0,
                        "running": True,
                        "start_time": other_start,
                    },
                ]
            )
        )
        fake_scontrol.set_job(
            "4301", ArrayJobId="4300", ArrayTaskId="2", UserId="nobody(65534)", StartTime=job_start
        )
        fake_scontrol.set_job(
            "4300", ArrayJobId="4300", ArrayTaskId="1", UserId="nobody(65534)", StartTime=job_start
        )
        # the array's meta id lists every task (seen on 22.05), here the other task first
        meta = Path(fake_scontrol.bin_dir) / "job-4300.txt"
        meta.write_text((Path(fake_scontrol.bin_dir) / "job-4301.txt").read_text() + meta.read_text())
        cfg = site(
            health={"clean_dev_shm": False, "memory_release_wait": 0.1},
            slurm={"bin_dir": fake_scontrol.bin_dir},
        )
        for job in ("4301", "4300"):
            res, _ = run_epilog(cfg, {"SLURM_JOB_ID": job})
            assert res.returncode == 0, res.stderr
        assert [u[4] for u in fake_acct.updates()] == ["jobid=4300_2", "jobid=4300_1"]
        task2 = fake_acct.summary("4300_2")["nodes"]["node1"]["gpus"]["0"]
        assert task2["p"] == 1 and task2["u"] == 80.0  # only the job's own process
        rec = epilog_record(tmp_path)["efficiency"]
        assert rec["job"]["source"] == "scontrol" and rec["job"]["start"] == job_start
        assert rec["admin_comment"]["ref"] == "4300_1"
        show = [c for c in fake_scontrol.calls() if c[:3] == ["-o", "show", "job"]]
        assert [c[3] for c in show] == ["4301", "4300"]
    finally:
        other.kill()
        other.wait()


@pytestmark_root
def test_the_environments_start_time_and_array_ids_need_no_scontrol(
    gpu_fixture, site, fake_scontrol, fake_acct
):
    now = int(time.time())
    gpu_fixture(_accounting(g0=[{"pid": 999903, "gpu_util": 70, "time_ms": 10_000, "start_time": now - 20}]))
    cfg = site(
        health={"clean_dev_shm": False, "memory_release_wait": 0.1}, slurm={"bin_dir": fake_scontrol.bin_dir}
    )
    env = {"SLURM_JOB_ID": "4402", "SLURM_JOB_START_TIME": str(now - 60)}
    env.update(SLURM_ARRAY_JOB_ID="4400", SLURM_ARRAY_TASK_ID="7")
    res, _ = run_epilog(cfg, env)
    assert res.returncode == 0, res.stderr
    assert fake_acct.summary("4400_7")["nodes"]["node1"]["gpus"]["0"]["p"] == 1
    assert not [c for c in fake_scontrol.calls() if c[:3] == ["-o", "show", "job"]]


@pytestmark_root
@pytest.mark.parametrize("start_from", ["scontrol", "environment"])
def test_each_attempt_of_a_requeued_multi_node_job_gets_a_summary(
    gpu_fixture, site, fake_scontrol, fake_acct, start_from
):
    """Failed before: the merge directory was keyed by job id only, so the second attempt's
    nodes found the first attempt's merge marker and nobody wrote its summary. On 22.05 both
    attempts' epilogs have ``SLURM_JOB_RESTART_COUNT=1`` (the requeued attempt's epilog runs
    after the count went up; seen on the devcluster): only the start time tells them apart."""
    for node in ("node1", "node2"):
        gpu_fixture(node=node)
    cfg = site(
        health={"clean_dev_shm": False, "memory_release_wait": 0.1, "efficiency": {"merge_wait": 0.5}},
        slurm={"bin_dir": fake_scontrol.bin_dir},
    )
    now = int(time.time())
    for attempt, start in (("0", now - 300), ("1", now - 200), ("1", now - 100)):
        fake_acct.reset()
        fake_scontrol.set_job("4500", UserId="nobody(65534)", Restarts=attempt, StartTime=start)
        for node in ("node2", "node1"):
            env = {"SLURM_JOB_ID": "4500", "SLURM_NODELIST": "node[1-2]", "SLURMD_NODENAME": node}
            env["SLURM_JOB_RESTART_COUNT"] = attempt
            if start_from == "environment":
                env["SLURM_JOB_START_TIME"] = str(start)
            res, _ = run_epilog(cfg, env)
            assert res.returncode == 0, res.stderr
        summary = fake_acct.summary("4500")
        assert set(summary["nodes"]) == {"node1", "node2"} and summary["missing"] == [], (attempt, start)


def test_merge_directories_are_per_attempt():
    assert eff.merge_key("77") == eff.merge_key("77", 0, 1_800_000_000.0) == "77"
    assert eff.merge_key("77", 2) == eff.merge_key("77", 2, float("nan")) == "77.2"
    assert eff.merge_key("77", 1, 1_800_000_000.5) == "77.1.1800000000"
    for bad in (("7/../8", 0), ("77", -1), ("", 0)):
        with pytest.raises(ValueError):
            eff.merge_key(*bad)


@pytestmark_root
def test_a_start_time_without_array_ids_still_asks_scontrol_for_them(
    gpu_fixture, site, fake_scontrol, fake_acct
):
    """Slurm 24.11 and 26.05 give the epilog ``SLURM_JOB_START_TIME`` but no ``SLURM_ARRAY_*``
    (seen on the devcluster, etc/dev/release-probe). Failed before: the start time alone
    skipped scontrol, so the task holding the array's own id wrote ``jobid=<array id>``,
    which sacctmgr applies to every task of the array."""
    now = int(time.time())
    gpu_fixture(_accounting(g0=[{"pid": 999904, "gpu_util": 60, "time_ms": 10_000, "start_time": now - 20}]))
    cfg = site(
        health={"clean_dev_shm": False, "memory_release_wait": 0.1}, slurm={"bin_dir": fake_scontrol.bin_dir}
    )
    fake_scontrol.set_job(
        "4600", ArrayJobId="4600", ArrayTaskId="1", UserId="nobody(65534)", StartTime=now - 60
    )
    res, _ = run_epilog(cfg, {"SLURM_JOB_ID": "4600", "SLURM_JOB_START_TIME": str(now - 60)})
    assert res.returncode == 0, res.stderr
    assert [u[4] for u in fake_acct.updates()] == ["jobid=4600_1"]
    assert [c[3] for c in fake_scontrol.calls() if c[:3] == ["-o", "show", "job"]] == ["4600"]
