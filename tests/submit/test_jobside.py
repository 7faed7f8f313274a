"""Job-side decisions: head address, signal cause, verdicts, requeue-with-exclude."""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
import sys

import pytest

from slurmkit.slurm import runner
from slurmkit.slurm.runner import Result
from slurmkit.submit import jobside
from slurmkit.verdict.base import CheckResult, Status
from slurmkit.verdict.store import VerdictStore


def fake_resolver(mapping):
    def resolve(host, port, family, kind):
        if host not in mapping:
            raise socket.gaierror(-2, "Name or service not known")
        return [(family, kind, 6, "", (addr, 0)) for addr in mapping[host]]

    return resolve


def test_resolve_head_refuses_loopback():
    r = fake_resolver({"node1": ["127.0.1.1"], "node2": ["127.0.0.1", "10.0.0.2"], "node3": ["10.77.0.13"]})
    addr, why = jobside.resolve_reachable("node1", r)
    assert addr is None and "resolves only to loopback (127.0.1.1)" in why
    assert jobside.resolve_reachable("node2", r)[0] == "10.0.0.2"
    assert jobside.resolve_reachable("node3", r)[0] == "10.77.0.13"
    assert jobside.resolve_reachable("localhost", r)[0] is None
    assert "cannot resolve" in jobside.resolve_reachable("ghost", r)[1]


@pytest.mark.parametrize("host", ["localhost", ""])
def test_resolve_head_refuses_localhost_even_if_it_resolves_to_a_cluster_address(host):
    """The guard itself, not the resolver, refuses: a hosts file that maps ``localhost`` to
    the node's own address still gives every node a different rendezvous (itself)."""
    asked = []

    def resolver(name, port, family, kind):
        asked.append(name)
        return [(family, kind, 6, "", ("10.0.0.7", 0))]

    addr, why = jobside.resolve_reachable(host, resolver)
    assert addr is None and "is not a name other nodes can use" in why
    assert asked == []


def test_resolve_head_command_exit_code(capsys, monkeypatch):
    monkeypatch.setattr(
        jobside.socket, "getaddrinfo", fake_resolver({"n1": ["127.0.0.1"], "n2": ["10.1.1.2"]})
    )
    assert jobside.main(["resolve-head", "n1"]) == 1
    assert "rendezvous host" in capsys.readouterr().err
    assert jobside.main(["resolve-head", "n2"]) == 0
    assert capsys.readouterr().out.strip() == "10.1.1.2"


@pytest.mark.parametrize(
    "remaining,cause", [(100, "timeout"), (170, "timeout"), (181, "preempt"), (3000, "preempt")]
)
def test_signal_cause(remaining, cause):
    assert jobside.signal_cause(remaining, 90, 3600) == cause
    assert jobside.signal_cause(remaining, 90, 0) == "preempt"  # unlimited: never a time limit


class FakeScontrol:
    """Answers scontrol calls like a running job whose ExcNodeList Slurm will not change."""

    def __init__(self, exc_nodes="(null)", running=True):
        self.calls = []
        self.exc_nodes = exc_nodes
        self.running = running

    def __call__(self, argv, timeout, input, env):
        args = list(argv[1:])
        self.calls.append(args)
        if args[:3] == ["-o", "show", "job"]:
            return Result(argv, 0, f"JobId={args[3]} JobState=RUNNING ExcNodeList={self.exc_nodes}\n", "", 0)
        if args[0] == "update" and self.running:
            return Result(argv, 1, "", "Job is no longer pending execution for job 77\n", 0)
        return Result(argv, 0, "", "", 0)


@pytest.fixture
def fake_scontrol(monkeypatch):
    fake = FakeScontrol(exc_nodes="node9")
    prev = runner.set_runner(fake)
    spawned = []
    monkeypatch.setattr(jobside.runner, "spawn", lambda argv, **kw: spawned.append(argv))
    monkeypatch.setattr(jobside.signal, "signal", lambda *a: None)
    fake.spawned = spawned
    yield fake
    runner.set_runner(prev)


def requeue_args(tmp_path, **kw):
    base = dict(
        job_id="77",
        state_dir=str(tmp_path),
        nodelist="node[1-2]",
        max_retries=2,
        max_node_failures=2,
        verdict_root=None,
        no_requeue=False,
    )
    base.update(kw)
    return argparse.Namespace(**base)


def test_node_failure_requeue_accumulates_excludes(tmp_path, fake_scontrol):
    rc = jobside.requeue_for_nodes(requeue_args(tmp_path), {"node2": "slow"}, "pre-flight")
    assert rc == jobside.REQUEUED_EXIT
    # Slurm refuses ExcNodeList on a running job: requeue-and-hold, then a helper sets it and releases.
    assert ["update", "JobId=77", "ExcNodeList=node[2,9]"] in fake_scontrol.calls
    assert ["requeuehold", "77"] in fake_scontrol.calls
    helper = fake_scontrol.spawned[0]
    assert helper[-4:] == ["--job-id", "77", "--exclude", "node[2,9]"]
    state = json.loads((tmp_path / jobside.STATE_FILE).read_text())
    assert state["node"] == 1 and state["excluded"] == ["node2", "node9"]
    # A second failure adds to the list (state file + the job's current ExcNodeList).
    fake_scontrol.exc_nodes = "node[2,9]"
    jobside.requeue_for_nodes(requeue_args(tmp_path), {"node1": "never joined"}, "pre-flight")
    assert ["update", "JobId=77", "ExcNodeList=node[1-2,9]"] in fake_scontrol.calls
    # The third is over max_node_failures: no requeue.
    n_calls = len(fake_scontrol.calls)
    assert jobside.requeue_for_nodes(requeue_args(tmp_path), {"node3": "x"}, "pre-flight") == 1
    assert not any(c[0] in ("requeue", "requeuehold") for c in fake_scontrol.calls[n_calls:])


def test_requeue_direct_when_slurm_accepts_the_update(tmp_path, fake_scontrol):
    fake_scontrol.running = False
    jobside.requeue_for_nodes(requeue_args(tmp_path), {"node2": "slow"}, "fabric check")
    assert fake_scontrol.calls[-1] == ["requeue", "77"]
    assert not fake_scontrol.spawned


def test_signal_requeue_counts_causes_separately(tmp_path, fake_scontrol):
    def call(remaining):
        ns = requeue_args(tmp_path, signal_remaining_s=remaining, grace_s=90, time_limit_s=3600)
        return jobside.cmd_requeue(ns)

    assert call(60) == jobside.REQUEUED_EXIT  # time limit 1
    assert call(3000) == jobside.REQUEUED_EXIT  # preemption 1
    assert call(60) == jobside.REQUEUED_EXIT  # time limit 2
    assert call(60) == 1  # time limit 3 > max_retries 2
    assert call(3000) == jobside.REQUEUED_EXIT  # preemption 2: its own budget
    state = json.loads((tmp_path / jobside.STATE_FILE).read_text())
    assert (state["timeout"], state["preempt"]) == (2, 2)
    assert [c for c in fake_scontrol.calls if c[0] == "requeue"] == [["requeue", "77"]] * 4


def test_no_requeue_policy(tmp_path, fake_scontrol):
    ns = requeue_args(tmp_path, no_requeue=True, signal_remaining_s=60, grace_s=90, time_limit_s=3600)
    assert jobside.cmd_requeue(ns) == 1
    assert jobside.requeue_for_nodes(requeue_args(tmp_path, no_requeue=True), {"n": "x"}, "pre-flight") == 1
    assert fake_scontrol.calls == []


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_preflight_verdict_from_summary(tmp_path):
    write(
        tmp_path / "preflight" / "summary.json", {"ok": False, "bad_nodes": {"node2": "slow"}, "message": "m"}
    )
    bad, msg, ok = jobside.preflight_verdict(str(tmp_path), ["node1", "node2"], 1)
    assert bad == {"node2": "slow"} and not ok
    write(tmp_path / "preflight" / "summary.json", {"ok": True, "message": "fine"})
    assert jobside.preflight_verdict(str(tmp_path), ["node1", "node2"], 0) == ({}, "fine", True)


def test_preflight_verdict_names_nodes_that_never_joined_or_started(tmp_path):
    p = tmp_path / "preflight"
    for n in ("node1", "node2"):
        write(p / f"launched.{n}.json", {"node": n})
    write(p / "rank.0.json", {"node": "node1", "rank": 0})
    bad, msg, ok = jobside.preflight_verdict(str(tmp_path), ["node1", "node2", "node3"], 1)
    assert bad == {
        "node2": "it never joined the rendezvous",
        "node3": "the pre-flight step never started on it",
    }
    assert "node2: it never joined" in msg


def test_preflight_verdict_blames_first_failed_torchrun(tmp_path):
    p = tmp_path / "preflight"
    for n, end in (("node1", 400.0), ("node2", 60.0)):
        write(p / f"launched.{n}.json", {"node": n})
        write(p / f"exit.{n}.json", {"node": n, "rc": 1, "end": end})
    bad, _, _ = jobside.preflight_verdict(str(tmp_path), ["node1", "node2"], 1)
    assert list(bad) == ["node2"]
    write(p / "exit.node1.json", {"node": "node1", "rc": 1, "end": 61.0})  # simultaneous: nobody to blame
    assert jobside.preflight_verdict(str(tmp_path), ["node1", "node2"], 1)[0] == {}


def test_fabric_verdict(tmp_path):
    base = {"fabric": "infiniband", "ports": ["mlx5_0:1", "mlx5_1:1"], "rate_gbps": 400, "problems": []}
    write(tmp_path / "fabric" / "node1.json", base)
    write(tmp_path / "fabric" / "node2.json", dict(base, ports=["mlx5_0:1"]))
    write(tmp_path / "fabric" / "node3.json", base)
    bad, desc = jobside.fabric_verdict(str(tmp_path), ["node1", "node2", "node3", "node4"])
    assert set(bad) == {"node2", "node4"} and "did not run" in bad["node4"]


def test_sweep_verdicts_add_failed_nodes(monkeypatch, tmp_path):
    class Store:
        def __init__(self, root):
            assert root == "/shared"

        def node(self, name):
            return {
                "node1": {"gpu_ecc": {"status": "fail", "reason": "ECC", "valid_until": 2e9}},
                "node2": {"gpu_ecc": {"status": "fail", "reason": "old", "valid_until": 1.0}},
                "node3": {"nvlink": {"status": "ok"}},
            }.get(name, {})

    monkeypatch.setattr(jobside, "VerdictStore", Store)
    got = jobside.failed_verdict_nodes("/shared", ["node1", "node2", "node3"], now=1e9)
    assert got == {"node1": "sweep verdict gpu_ecc: ECC"}


def test_unreadable_sweep_store_is_tolerated(monkeypatch, capsys):
    """A store that cannot be read (a dead NFS mount, an untrusted directory) must not break
    a requeue: no node is excluded for it, and the job log says why."""

    class Broken:
        def __init__(self, root):
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(jobside, "VerdictStore", Broken)
    assert jobside.failed_verdict_nodes("/shared", ["node1"]) == {}


def test_node_env_never_overrides_user_values(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "node1")
    monkeypatch.setattr(jobside, "resolve_reachable", lambda host: ("10.77.0.11", ""))
    write(tmp_path / "fabric" / "node1.json", {"fabric": "infiniband", "ports": ["mlx5_0:1", "mlx5_1:1"]})
    ns = argparse.Namespace(
        device="cpu",
        round_dir=str(tmp_path),
        fabric="auto",
        profiles_dir=None,
        hca="auto",
        socket_ifname="auto",
    )
    ifs = {"lo": ["127.0.0.1"], "eth0": ["10.77.0.11"]}
    add, notes = jobside.node_env(ns, {"NCCL_IB_TIMEOUT": "19"}, "node1", if_addrs=ifs)
    assert add["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert add["NCCL_SOCKET_IFNAME"] == "=eth0" and add["GLOO_SOCKET_IFNAME"] == "eth0"
    assert "NCCL_IB_TIMEOUT" not in add  # user's 19 stays
    assert add["CUDA_VISIBLE_DEVICES"] == ""


def test_finish_requeue_waits_for_pending_then_sets_excludes_and_releases(monkeypatch):
    states = iter(["COMPLETING", "PENDING"])
    calls = []

    def fake(argv, timeout, input, env):
        args = list(argv[1:])
        calls.append(args)
        if args[:3] == ["-o", "show", "job"]:
            return Result(argv, 0, f"JobId=77 JobState={next(states)} ExcNodeList=(null)\n", "", 0)
        return Result(argv, 0, "", "", 0)

    prev = runner.set_runner(fake)
    monkeypatch.setattr(jobside.time, "sleep", lambda s: None)
    try:
        assert (
            jobside.main(["finish-requeue", "--job-id", "77", "--exclude", "node[1-2]", "--timeout", "30"])
            == 0
        )
    finally:
        runner.set_runner(prev)
    assert calls[-2:] == [["update", "JobId=77", "ExcNodeList=node[1-2]"], ["release", "77"]]


def test_postmortem_verdict_reads_its_own_directory(tmp_path):
    write(tmp_path / "preflight" / "summary.json", {"ok": True, "message": "initial ok"})
    write(
        tmp_path / "postmortem" / "summary.json",
        {"ok": False, "bad_nodes": {"node2": "slow"}, "message": "m"},
    )
    assert jobside.preflight_verdict(str(tmp_path), ["node1", "node2"], 1, "postmortem")[0] == {
        "node2": "slow"
    }
    assert jobside.preflight_verdict(str(tmp_path), ["node1", "node2"], 0)[2] is True


def test_real_sweep_store_failures_are_excluded(tmp_path):
    """Against the real VerdictStore."""
    store = VerdictStore(str(tmp_path))
    store.record(
        "node2",
        [CheckResult("nccl_allreduce", Status.FAIL, code="NCCL_SLOW", reason="busbw 80 < 350")],
        valid_for_s=3600,
    )
    store.record("node1", [CheckResult("nccl_allreduce", Status.OK)], valid_for_s=3600)
    got = jobside.failed_verdict_nodes(str(tmp_path), ["node1", "node2", "node3"])
    assert list(got) == ["node2"] and "nccl_allreduce" in got["node2"]


# --------------------------------------------------------------------------- compiler caches


@pytest.fixture
def node_tmp(tmp_path):
    d = tmp_path / "tmp"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


def test_cache_dir_is_created_private_under_tmpdir(node_tmp):
    path, note = jobside.node_cache_dir("42", {"TMPDIR": str(node_tmp)})
    assert path == str(node_tmp / "slurmkit-42") and note == ""
    st = os.lstat(path)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    # a later step of the same job on this node reuses it
    assert jobside.node_cache_dir("42", {"TMPDIR": str(node_tmp)}) == (path, "")


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's directory needs chown (root)")
@pytest.mark.parametrize("how", ["theirs-0700", "theirs-0777", "mine-0755", "link"])
def test_a_prepared_cache_dir_is_left_alone_and_a_fresh_one_used(node_tmp, tmp_path, how):
    planted = node_tmp / "slurmkit-43"
    if how == "link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        planted.symlink_to(tmp_path / "elsewhere")
        os.lchown(planted, 65534, 65534)
    else:
        who, mode = how.split("-")
        (planted / "inductor").mkdir(parents=True)
        (planted / "inductor" / "evil.py").write_text("raise SystemExit('pwned')\n")
        os.chmod(planted, int(mode, 8))
        if who == "theirs":
            os.chown(planted, 65534, 65534)
    path, note = jobside.node_cache_dir("43", {"TMPDIR": str(node_tmp)})
    assert path and path != str(planted) and os.path.dirname(path) == str(node_tmp)
    assert os.path.basename(path).startswith("slurmkit-43-")
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o700 and os.listdir(path) == []
    assert f"not using {planted}" in note


def test_node_launch_points_the_caches_at_the_private_dir(node_tmp, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(node_tmp))
    monkeypatch.setenv("SLURM_JOB_ID", "44")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/somewhere-shared")
    out = tmp_path / "env.json"
    code = (
        "import json, os, sys; json.dump({k: os.environ.get(k) for k in "
        "('TRITON_CACHE_DIR', 'TORCHINDUCTOR_CACHE_DIR', 'SLURMKIT_NODE_TMP')}, open(sys.argv[1], 'w'))"
    )
    args = jobside.parser().parse_args(
        ["node-launch", "--phase", "train", "--fabric", "none", "--", sys.executable, "-c", code, str(out)]
    )
    assert jobside.cmd_node_launch(args) == 0
    env = json.loads(out.read_text())
    base = str(node_tmp / "slurmkit-44")
    assert env == {
        "SLURMKIT_NODE_TMP": base,
        "TRITON_CACHE_DIR": base + "/triton",
        "TORCHINDUCTOR_CACHE_DIR": base + "/inductor",
    }
    for sub in ("triton", "inductor"):
        assert stat.S_IMODE(os.lstat(os.path.join(base, sub)).st_mode) == 0o700
