"""slurmkit.api: the same validation, messages, overrides and rendering as ssubmit; --sweep
parsing; MaxArraySize; Job's view of a job array from canned squeue/sacct (the runner swapped,
as for every parsing and error-path test); typed errors, never a CalledProcessError."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from ssubmit_helpers import SPECS

import slurmkit.api as sk
from slurmkit.cli.common import run_main
from slurmkit.errors import ConfigError, SlurmCommandError, SlurmkitError, UsageError
from slurmkit.slurm import runner
from slurmkit.slurm.runner import Result

US = "\x1f"


@pytest.fixture
def site(monkeypatch, tmp_path):
    cfg = tmp_path / "slurmkit.yaml"
    cfg.write_text(
        f"paths: {{shared_dir: {tmp_path}/shared}}\n"
        f"submit: {{python: /opt/py, record_dir: {tmp_path}/records, wait_poll_seconds: 0.2}}\n"
    )
    monkeypatch.setenv("SLURMKIT_CONFIG", str(cfg))
    monkeypatch.chdir(tmp_path)
    return cfg


class Canned:
    """sacct/squeue/scontrol/sinfo/sbatch answers, keyed by command name; records the calls."""

    def __init__(self, **answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv, timeout, input, env):
        name = argv[0].rsplit("/", 1)[-1]
        self.calls.append((name, list(argv[1:]), timeout))
        answer = self.answers.get(name, (0, ""))
        if callable(answer):
            answer = answer(argv)
        rc, out = answer
        return Result(argv, rc, out if rc == 0 else "", "" if rc == 0 else out, 0)


@pytest.fixture
def canned():
    holder = {}

    def install(**answers):
        fake = Canned(**answers)
        holder["prev"] = runner.set_runner(fake)
        return fake

    yield install
    if "prev" in holder:
        runner.set_runner(holder["prev"])


def cli(*args):
    import click

    from slurmkit.cli.ssubmit import cli as group

    class _Entry(click.Command):
        def main(self, args=None, prog_name=None, **extra):
            run_main(group, "ssubmit", args)

    return CliRunner().invoke(_Entry("ssubmit"), list(args))


# --------------------------------------------------------------------------- imports


def test_importing_the_api_loads_neither_click_nor_torch():
    code = (
        "import sys, slurmkit.api; heavy = [m for m in ('click', 'torch', 'triton') if m in sys.modules];"
        "assert not heavy, heavy"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


# --------------------------------------------------------------------------- Spec


BAD_SPECS = [
    ("script: t.py\nnodez: 2\n", "unknown key 'nodez'"),
    ("script: t.py\ntime: 1-2-3\n", "bad time limit"),
    ("script: t.py\nsweep:\n  grid: {lr: []}\n", "axis 'lr' is empty"),
    ("script: t.py\nsweep:\n  grid: {lr: [1]}\narray: 0-3\n", "set array or sweep"),
]


@pytest.mark.parametrize("text, needle", BAD_SPECS)
def test_api_errors_are_the_cli_errors(site, tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        sk.Spec.load(str(path))
    assert needle in str(err.value) and str(path) in str(err.value)
    res = subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.ssubmit", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == err.value.exit_code == 2
    assert res.stderr.strip() == f"ssubmit: error: {err.value}"


def test_from_dict_validates_the_same_way(site):
    with pytest.raises(ConfigError, match=r"^requeue.grace: must be >= 1, got 0$"):
        sk.Spec.from_dict({"script": "t.py", "requeue": {"grace": 0}})
    with pytest.raises(ConfigError, match="must be a mapping"):
        sk.Spec.from_dict(["script"])  # type: ignore[arg-type]


def test_with_overrides_is_set(site):
    base = sk.Spec.load(str(SPECS / "minimal.yaml"))
    by_api = base.with_overrides({"nodes": 3, "requeue.grace": 30, "env.MSG": "a b $(x)"})
    by_cli = sk.Spec.load(
        str(SPECS / "minimal.yaml"), sets=["nodes=3", "requeue.grace=30", "env.MSG=a b $(x)"]
    )
    assert by_api.data == by_cli.data and by_api.render().script == by_cli.render().script
    assert base.data["nodes"] != 3  # a new Spec; the old one is unchanged
    with pytest.raises(ConfigError, match="nodes: must be >= 1"):
        base.with_overrides({"nodes": 0})


def test_with_sweep_is_the_sweep_option(site, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("script: t.py\nsweep:\n  grid: {lr: [1, 2], seed: [0]}\n  max_parallel: 2\n")
    by_cli = sk.Spec.load(str(path), sweep=["seed=0..2", "wd=0.1,0.2"])
    by_api = sk.Spec.load(str(path)).with_sweep({"seed": range(3), "wd": ["0.1", "0.2"]})
    assert by_api.render().script == by_cli.render().script
    # seed keeps its place (replaced), wd comes last (added): 2 x 3 x 2, last axis fastest
    assert [t.params for t in by_cli.tasks][:3] == [
        {"lr": "1", "seed": "0", "wd": "0.1"},
        {"lr": "1", "seed": "0", "wd": "0.2"},
        {"lr": "1", "seed": "1", "wd": "0.1"},
    ]
    assert len(by_cli.tasks) == 12 and by_cli.data["array"] == "0-11%2"
    assert "sweep of 12 tasks" in repr(by_cli)


@pytest.mark.parametrize(
    "item, expected",
    [
        ("lr=1e-4,3e-4", ("lr", ["1e-4", "3e-4"])),
        ("seed=0..2", ("seed", [0, 1, 2])),
        ("seed=-1..1", ("seed", [-1, 0, 1])),
        ("n=0..10:5", ("n", [0, 5, 10])),
        ("n=4..4", ("n", [4])),
        ("tag=[a, 'b,c']", ("tag", ["a", "b,c"])),
        ("x=one", ("x", ["one"])),
    ],
)
def test_sweep_option(item, expected):
    assert sk.parse_sweep_option(item) == expected


@pytest.mark.parametrize(
    "item",
    ["lr", "=1", "1x=2", "lr=", "lr=1,,2", "seed=2..0", "seed=0..", "seed=a..b", "seed=0..4:0", "t=[]"],
)
def test_bad_sweep_options_are_one_line_usage_errors(item):
    with pytest.raises(UsageError) as err:
        sk.parse_sweep_option(item)
    assert err.value.exit_code == 2 and "\n" not in str(err.value) and repr(item) in str(err.value)


def test_bad_sweep_option_exits_2_with_one_line(site):
    res = cli(str(SPECS / "minimal.yaml"), "--dry-run", "--sweep", "seed=3..1")
    assert res.exit_code == 2
    assert (
        res.stderr.strip()
        == "ssubmit: error: --sweep 'seed=3..1': a range is LOW..HIGH[:STEP] with LOW <= HIGH and STEP >= 1"
    )


def test_dry_run_prints_the_task_table_and_the_script(site):
    res = cli(
        str(SPECS / "minimal.yaml"),
        "--dry-run",
        "--sweep",
        "lr=1e-4,3e-4",
        "--sweep",
        'tag=[plain, "a b\\n$x"]',
    )
    assert res.exit_code == 0, res.output
    assert "#SBATCH --array=0-3\n" in res.stdout
    table = res.stderr[res.stderr.index("# ---- sweep: 4 tasks") :].splitlines()
    assert table[1] == "# TASK  RUN NAME  PARAMETERS"
    assert table[2].split() == ["#", "0", "minimal-0", "lr=1e-4", "tag=plain"]
    assert table[5] == '#     3  minimal-3  lr=3e-4 tag="a b\\n$x"'
    data = json.loads(cli(str(SPECS / "minimal.yaml"), "--dry-run", "--json", "--sweep", "lr=1,2").stdout)
    assert [t["params"] for t in data["tasks"]] == [{"lr": "1"}, {"lr": "2"}]


# --------------------------------------------------------------------------- MaxArraySize


def config_with_max(n):
    return (
        0,
        f"Configuration data as of 2026-12-02T08:00:00\nMaxArraySize            = {n}\nMaxJobCount = 10000\n",
    )


@pytest.mark.parametrize("limit, ok", [(6, True), (5, False)])
def test_max_array_size_boundary(site, canned, tmp_path, limit, ok):
    canned(scontrol=config_with_max(limit), sinfo=(0, "node1|idle|gpu:8|debug*|16|64000|none\n"))
    path = tmp_path / "s.yaml"
    path.write_text("script: t.py\nsweep: {grid: {lr: [1, 2], seed: [0, 1, 2]}}\n")
    spec = sk.Spec.load(str(path))
    if ok:
        assert spec.check_cluster() == []
    else:
        with pytest.raises(ConfigError) as err:
            spec.check_cluster()
        assert str(err.value) == (
            f"{path}: sweep: 6 tasks is more than the cluster's MaxArraySize 5 (scontrol show config); split the sweep"
        )
        res = cli(str(path), "--parsable")
        assert res.exit_code == 2 and "MaxArraySize 5" in res.stderr and len(res.stderr.splitlines()) == 1


def test_failing_scontrol_only_warns(site, canned, tmp_path):
    canned(scontrol=(1, "slurm_load_ctl_conf error: Unable to contact slurm controller"), sinfo=(0, ""))
    path = tmp_path / "s.yaml"
    path.write_text("script: t.py\nsweep: {grid: {lr: [1, 2]}}\n")
    notes = sk.Spec.load(str(path)).check_cluster()
    assert len(notes) == 1 and notes[0].startswith("MaxArraySize check skipped:")


# --------------------------------------------------------------------------- Job


def sacct_rows(*rows):
    return (0, "".join(US.join(r) + "\n" for r in rows))


def array_answers(sacct, squeue=""):
    def sacct_answer(argv):
        if any(a.endswith("AdminComment") for a in argv):
            return (0, "")  # no efficiency summaries (CPU tasks)
        return sacct

    return {"sacct": sacct_answer, "squeue": (0, squeue), "scontrol": (1, "Invalid job id specified")}


def test_array_status_merges_squeue_and_sacct_and_counts_restarts(site, canned):
    fake = canned(
        **array_answers(
            sacct_rows(
                ("70_0", "71", "COMPLETED", "0:0", "node1"),
                ("70_1", "72", "REQUEUED", "0:0", "node2"),
                ("70_1", "72", "FAILED", "7:0", "node1"),
                ("70_2", "73", "RUNNING", "0:0", "node2"),
                ("70_[3-4%2]", "70", "PENDING", "0:0", "None assigned"),
            ),
            "70_2|73|RUNNING|root|debug|node2|None|sw\n70_3|70|PENDING|root|debug||JobArrayTaskLimit|sw\n"
            "70_4|70|PENDING|root|debug||JobArrayTaskLimit|sw\n",
        )
    )
    job = sk.Job("70")
    rows = job.status()
    assert [(r.index, r.state, r.exit_code, r.restarts) for r in rows] == [
        (0, "COMPLETED", 0, 0),
        (1, "FAILED", 7, 1),
        (2, "RUNNING", None, 0),
        (3, "PENDING", None, 0),
        (4, "PENDING", None, 0),
    ]
    assert job.is_array and job.state() == "RUNNING" and not job.done() and job.exit_code is None
    assert [t.job_id for t in job.tasks] == [f"70_{i}" for i in range(5)]
    squeue = [c for c in fake.calls if c[0] == "squeue"][0]
    assert "-r" in squeue[1] and squeue[2] == sk.STATUS_TIMEOUT  # every pending task, with a timeout


def test_array_status_drops_the_meta_record_slurmdbd_still_lists_under_the_bare_id(site, canned):
    """Just after an array's last task splits off, sacct can still print the meta record as
    ``42`` (raw id 42) while squeue shows ``42_1`` (its own id, 42) running: the status lists
    the two tasks, the meta task with its raw id from squeue, and no bare row."""
    canned(
        **array_answers(
            sacct_rows(
                ("42_0", "43", "RUNNING", "0:0", "node1"),
                ("42", "42", "PENDING", "0:0", "None assigned"),
            ),
            "42_0|43|RUNNING|root|debug|node1|None|sw\n42_1|42|RUNNING|root|debug|node2|None|sw\n",
        )
    )
    rows = sk.Job("42").status(efficiency=False)
    assert [(r.job_id, r.raw_id, r.state, r.nodes) for r in rows] == [
        ("42_0", "43", "RUNNING", "node1"),
        ("42_1", "42", "RUNNING", "node2"),
    ]


def test_array_end_state_and_exit_code(site, canned):
    canned(
        **array_answers(
            sacct_rows(
                ("80_0", "81", "COMPLETED", "0:0", "node1"),
                ("80_1", "82", "FAILED", "7:0", "node1"),
                ("80_2", "83", "COMPLETED", "0:0", "node2"),
            )
        )
    )
    job = sk.Job("80")
    assert job.wait(timeout=5, poll=0.01) == "FAILED" and job.exit_code == 7 and job.restarts == 0
    task = sk.Job("80_1")
    assert not task.is_array and task.task_index == 1


def test_wait_times_out_with_a_typed_error(site, canned):
    canned(squeue=(0, "90|90|RUNNING|root|debug|node1|None|j\n"), sacct=(0, ""))
    with pytest.raises(sk.WaitTimeout) as err:
        sk.Job("90").wait(timeout=0.05, poll=0.01)
    assert err.value.exit_code == 124  # GNU timeout's code: one exit code per meaning


def test_slurm_failures_are_typed(site, canned):
    canned(sacct=(1, "sacct: error: slurmdbd: Connection refused"))
    with pytest.raises(SlurmCommandError) as err:
        sk.Job("91").state()
    assert err.value.exit_code == 3 and "Connection refused" in str(err.value)
    assert not isinstance(err.value, subprocess.CalledProcessError)
    assert "state unknown" in repr(sk.Job("91"))


@pytest.mark.parametrize("bad", ["", "12;rm", "1_2_3", "abc", "-1", "1 2"])
def test_bad_job_ids_are_usage_errors(site, bad):
    with pytest.raises(UsageError):
        sk.Job(bad)


def test_cancel_with_signal_signals_the_batch_shell(site, canned):
    fake = canned(scancel=(0, ""))
    sk.Job("95_2").cancel(signal="USR2")
    assert fake.calls[-1][:2] == ("scancel", ["--signal=USR2", "--batch", "95_2"])
    with pytest.raises(UsageError):
        sk.Job("95").cancel(signal="USR2; rm -rf /")


def test_status_cli_prints_one_row_per_task(site, canned):
    canned(
        **array_answers(
            sacct_rows(
                ("60_0", "61", "COMPLETED", "0:0", "node1"),
                ("60_1", "62", "FAILED", "7:0", "node1"),
            )
        )
    )
    res = cli("status", "60")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["TASK", "STATE", "EXIT", "RESTARTS", "EFFICIENCY", "PARAMETERS"]
    assert lines[2].split() == ["1", "FAILED", "7:0", "0", "-", "-"]
    data = json.loads(cli("status", "60", "--json").stdout)
    assert [t["exit_code"] for t in data["tasks"]] == [0, 7] and data["state"] == "FAILED"


def test_every_error_is_a_slurmkit_error():
    for cls in (ConfigError, UsageError, SlurmCommandError, sk.WaitTimeout):
        assert issubclass(cls, SlurmkitError)


def test_task_table_keeps_a_hostile_name_on_one_line(site, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text('script: t.py\nname: "a\\nb $(x)"\nsweep: {grid: {lr: [1]}}\n')
    res = cli(str(path), "--dry-run")
    assert res.exit_code == 0, res.output
    table = res.stderr[res.stderr.index("# TASK") :].splitlines()
    assert table[1] == '#     0  "a\\nb $(x)-0"  lr=1' and len(table) == 2


def test_status_of_one_task_shows_its_parameters_and_checkpoint_requeues(site, canned, tmp_path):
    """``ssubmit status 50_1``: one task of a sweep submitted here (its record), its own
    checkpoint directory's requeue counts and its parameters."""
    rows = [
        {"JobID": "50_1", "JobIDRaw": "52", "State": "COMPLETED", "ExitCode": "0:0", "NodeList": "node2"},
    ]

    def sacct(argv):
        fmt = next(a for a in argv if a.startswith("--format=")).split("=", 1)[1].split(",")
        if "AdminComment" in fmt:
            return (0, "")
        return (0, "".join(US.join(r.get(f, "") for f in fmt) + "\n" for r in rows))

    canned(sacct=sacct, squeue=(0, ""), scontrol=(1, "Invalid job id specified"))
    ckpt = tmp_path / "ck" / "50_1" / ".slurmkit"
    ckpt.mkdir(parents=True)
    (ckpt / "requeue-state.json").write_text('{"timeout": 0, "preempt": 2, "node": 1}')
    records = tmp_path / "records"
    records.mkdir()
    (records / "50.json").write_text(
        json.dumps(
            {
                "job_id": "50",
                "name": "sw",
                "output": "log-%A_%a.out",
                "workdir": str(tmp_path),
                "settings": {"checkpoint_dir": str(tmp_path / "ck" / "{array_job_id}_{array_task_id}")},
                "tasks": [{"index": 0, "params": {"lr": "1"}}, {"index": 1, "params": {"lr": "a b"}}],
            }
        )
    )
    res = cli("status", "50_1")
    assert res.exit_code == 0, res.output
    out = dict(line.split(None, 1) for line in res.stdout.splitlines())
    assert out["state"] == "COMPLETED" and out["params"] == 'lr="a b"'
    assert out["requeues"] == "time limit 0, preemption 2, node failures 1"
    assert out["log"] == str(tmp_path / "log-50_1.out")
    job = sk.Job("50")
    assert job.is_array and [r.checkpoint_dir for r in job.status(efficiency=False)] == [
        str(tmp_path / "ck" / "50_1")
    ]
