"""The ssubmit CLI through click's CliRunner: outputs, exit codes, no submission on errors."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner
from ssubmit_helpers import REPO, SPECS

from slurmkit.api import expand_output
from slurmkit.cli.common import run_main
from slurmkit.cli.ssubmit import cli
from slurmkit.slurm import runner
from slurmkit.slurm.runner import Result


class FakeSlurm:
    """Canned answers for sbatch/squeue/sacct/sinfo/scontrol; records what was called."""

    def __init__(self, sbatch_rc=0, sacct_state="COMPLETED", exit_code="0:0", sinfo_rc=0):
        self.calls = []
        self.sbatch_rc, self.sacct_state, self.exit_code, self.sinfo_rc = (
            sbatch_rc,
            sacct_state,
            exit_code,
            sinfo_rc,
        )
        self.squeue_polls = 1

    def __call__(self, argv, timeout, input, env):
        name = argv[0].rsplit("/", 1)[-1]
        self.calls.append((name, list(argv[1:]), input))
        if name == "sbatch":
            if self.sbatch_rc:
                return Result(
                    argv,
                    self.sbatch_rc,
                    "",
                    "sbatch: error: Batch job submission failed: "
                    "Invalid account or account/partition combination specified\n",
                    0,
                )
            return Result(argv, 0, "4242\n", "", 0)
        if name == "sinfo":
            if self.sinfo_rc:
                return Result(argv, 1, "", "sinfo: error: unable to contact slurmctld\n", 0)
            return Result(
                argv,
                0,
                "node1|idle|gpu:h100:8|debug*|16|64000|none\nnode2|idle|gpu:h100:8|debug*|16|64000|none\n",
                "",
                0,
            )
        if name == "squeue":
            if self.squeue_polls > 0:
                self.squeue_polls -= 1
                return Result(argv, 0, "4242|4242|RUNNING|root|debug|node[1-2]|None|job\n", "", 0)
            return Result(argv, 0, "", "", 0)
        if name == "sacct":
            return Result(argv, 0, f"4242\x1f{self.sacct_state}\x1f{self.exit_code}\x1fnode[1-2]\n", "", 0)
        if name == "scontrol":
            return Result(argv, 1, "", "slurm_load_jobs error: Invalid job id specified\n", 0)
        if name == "scancel":
            return Result(argv, 0, "", "", 0)
        return Result(argv, 127, "", "unexpected", 0)

    def names(self):
        return [c[0] for c in self.calls]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    cfg = tmp_path / "slurmkit.yaml"
    cfg.write_text(
        f"paths: {{shared_dir: {tmp_path}/shared}}\n"
        f"submit: {{python: /opt/py, record_dir: {tmp_path}/records, wait_poll_seconds: 0.2}}\n"
    )
    monkeypatch.setenv("SLURMKIT_CONFIG", str(cfg))
    monkeypatch.chdir(tmp_path)
    f = FakeSlurm()
    prev = runner.set_runner(f)
    yield f
    runner.set_runner(prev)


class _Entry(click.Command):
    """Runs the CLI through run_main, so exit codes are the real ones."""

    def main(self, args=None, prog_name=None, **extra):
        run_main(cli, "ssubmit", args)


def invoke(*args):
    return CliRunner().invoke(_Entry("ssubmit"), list(args))


def run_cli(*args, env=None):
    """Through the real entry point (run_main: exit codes, one-line errors)."""
    return subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.ssubmit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_dry_run_prints_script_and_settings_and_submits_nothing(fake):
    fake.sinfo_rc = 1  # the spec targets a 16-node partition this fake cluster lacks
    res = invoke(*[str(SPECS / "ib-8gpu.yaml"), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("#!/bin/bash\n")
    assert "#SBATCH --gres=gpu:h100:8" in res.stdout
    assert "resolved settings" in res.stderr and "nccl_profile: infiniband" in res.stderr
    assert "sbatch" not in fake.names()


def test_dry_run_json(fake):
    res = invoke(*[str(SPECS / "minimal.yaml"), "--dry-run", "--json", "--set", "nodes=2"])
    data = json.loads(res.stdout)
    assert data["settings"]["nodes"] == 2 and "#SBATCH --nodes=2" in data["script"]


def test_submit_parsable_records_the_job(fake, tmp_path):
    res = invoke(*[str(SPECS / "minimal.yaml"), "--parsable"])
    assert res.exit_code == 0 and res.stdout == "4242\n"
    sbatch = [c for c in fake.calls if c[0] == "sbatch"][0]
    assert sbatch[1][0] == "--parsable" and sbatch[2].startswith("#!/bin/bash")
    record = json.loads((tmp_path / "records" / "4242.json").read_text())
    assert record["log"] == str(tmp_path / "slurmkit-4242.out")


def test_the_job_record_is_written_atomically(fake, tmp_path):
    """Written under a temporary name and renamed: a symlink planted at the record's path is
    replaced, never followed (its target is untouched), and no temporary file is left."""
    records = tmp_path / "records"
    records.mkdir()
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me\n")
    (records / "4242.json").symlink_to(target)
    res = invoke(*[str(SPECS / "minimal.yaml"), "--parsable"])
    assert res.exit_code == 0, res.output
    assert target.read_text() == "keep me\n"
    assert not (records / "4242.json").is_symlink()
    assert json.loads((records / "4242.json").read_text())["job_id"] == "4242"
    assert sorted(p.name for p in records.iterdir()) == ["4242.json"]


def test_hostile_name_is_one_sbatch_argv_item(fake):
    invoke(*[str(SPECS / "hostile.yaml"), "--parsable"])
    sbatch = [c for c in fake.calls if c[0] == "sbatch"][0]
    assert '--job-name=a\'; echo pwned; $(touch /tmp/x) `id` "q"' in sbatch[1]


def test_gpus_above_partition_refused_before_submitting(fake):
    res = invoke(*[str(SPECS / "minimal.yaml"), "--set", "gpus_per_node=16"])
    assert res.exit_code == 2
    assert "gpus_per_node 16 is more than any node" in res.stderr
    assert "sbatch" not in fake.names()


def test_sinfo_unavailable_is_tolerated(fake):
    fake.sinfo_rc = 1
    res = invoke(*[str(SPECS / "minimal.yaml"), "--dry-run"])
    assert res.exit_code == 0 and "partition check skipped" in res.stderr


@pytest.mark.parametrize(
    "state,code,want",
    [("COMPLETED", "0:0", 0), ("FAILED", "7:0", 7), ("CANCELLED", "0:15", 1), ("TIMEOUT", "0:0", 1)],
)
def test_wait_exit_codes(fake, state, code, want):
    fake.sacct_state, fake.exit_code = state, code
    res = invoke(*[str(SPECS / "minimal.yaml"), "--wait"])
    assert res.exit_code == want, res.output
    assert f"ended {state}" in res.stderr


def test_wait_timeout_exits_124(fake):
    fake.squeue_polls = 10**6
    res = invoke(*[str(SPECS / "minimal.yaml"), "--wait", "--wait-timeout", "0.5"])
    assert res.exit_code == 124 and "still RUNNING" in res.stderr


def test_cancel_with_signal_targets_the_batch_shell(fake):
    res = invoke(*["cancel", "--signal", "USR2", "4242"])
    assert res.exit_code == 0
    assert ("scancel", ["--signal=USR2", "--batch", "4242"], None) in fake.calls


def test_expand_output():
    assert expand_output("logs/%x-%j.out", "7", "n", "/w") == "/w/logs/n-7.out"
    assert expand_output("/abs/100%%-%j", "7", "n", "/w") == "/abs/100%-7"


@pytest.mark.parametrize(
    "spec_text,needle",
    [
        ("script: /t.py\nnodes: -1\n", "nodes: must be >= 1"),
        ("script: /t.py\nbogus: 1\n", "unknown key 'bogus'"),
        ("script: [unclosed\n", "invalid YAML"),
        ("script: /t.py\nenv: {'A;B': 1}\n", "not a shell identifier"),
        ("script: /t.py\ntime: '1:2:3:4'\n", "bad time limit"),
    ],
)
def test_bad_specs_exit_2_with_one_line_and_nothing_submitted(tmp_path, spec_text, needle):
    spec = tmp_path / "bad.yaml"
    spec.write_text(spec_text)
    env = {"PATH": "/nonexistent", "SLURMKIT_CONFIG": str(tmp_path / "none.yaml")}
    (tmp_path / "none.yaml").write_text("{}\n")
    res = run_cli(str(spec), env=env)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr and str(spec) in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_missing_spec_file_and_usage_errors_exit_2(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "SLURMKIT_CONFIG": str(tmp_path / "c.yaml")}
    (tmp_path / "c.yaml").write_text("{}\n")
    res = run_cli(str(tmp_path / "nope.yaml"), env=env)
    assert res.returncode == 2 and "no such spec file" in res.stderr
    assert run_cli(str(SPECS / "minimal.yaml"), "--no-such-flag", env=env).returncode == 2


def test_slurm_failure_exits_3(fake):
    fake.sbatch_rc = 1
    res = invoke(str(SPECS / "minimal.yaml"))
    assert res.exit_code == 3
    assert "Invalid account" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_schema_file_is_up_to_date():
    res = invoke("schema")
    committed = (REPO / "docs" / "job-spec.schema.json").read_text()
    assert res.stdout == committed, (
        "docs/job-spec.schema.json is stale; regenerate: ssubmit schema > docs/job-spec.schema.json"
    )


def test_schema_accepts_examples_and_rejects_bad_specs():
    import jsonschema
    import yaml

    schema = json.loads((REPO / "docs" / "job-spec.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for path in [*SPECS.glob("*.yaml"), *(REPO / "job_templates" / "examples").glob("*.yaml")]:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    for bad in (
        {"script": "x", "nodes": -1},
        {"script": "x", "nodez": 1},
        {"script": "x", "env": {"A;B": "1"}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_cli_does_not_import_torch():
    code = (
        "import sys; from slurmkit.cli import ssubmit; from slurmkit.submit import spec, render, nccl, jobside;"
        "assert 'torch' not in sys.modules and 'triton' not in sys.modules, 'heavy import'"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode == 0


def test_wait_json_prints_one_json_object(fake):
    fake.sacct_state, fake.exit_code = "FAILED", "5:0"
    res = invoke(str(SPECS / "minimal.yaml"), "--wait", "--json")
    assert res.exit_code == 5
    data = json.loads(res.stdout)
    assert data["state"] == "FAILED" and data["exit"] == 5 and data["job_id"] == "4242"


def test_docs_cover_every_spec_key_and_exit_code():
    from slurmkit.submit.spec import SPEC_FIELDS

    doc = (REPO / "docs" / "ssubmit.md").read_text()
    missing = [k for k in SPEC_FIELDS if f"`{k}`" not in doc]
    assert not missing, f"docs/ssubmit.md does not mention: {missing}"
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 124 |"):
        assert code in doc


def test_wait_prints_one_efficiency_line_and_status_shows_it(fake):
    from slurmkit.slurm.admincomment import encode

    gpus = {
        "0": {"u": 90.0, "t": 7200.0, "b": 6480.0, "m": 61440, "c": 81920, "p": 1},
        **{str(i): {"u": 0.0, "t": 0.0, "b": 0.0, "m": 0, "c": 81920, "p": 0} for i in range(1, 8)},
    }
    token = encode({"v": 1, "job": "4242", "nodes": {"node1": {"acct": "on", "gpus": gpus}}, "missing": []})
    plain = fake.__call__

    def with_eff(argv, timeout, input, env):
        if argv[0].endswith("sacct") and any(a.endswith("AdminComment") for a in argv):
            row = [
                "4242",
                "4242",
                "COMPLETED",
                "billing=8,cpu=8,gres/gpu=8,mem=8000M,node=1",
                "1764400000",
                "1764403600",
                "3600",
                "root",
                "research",
                "debug",
                "node1",
                "",
                "",
                token,
            ]
            return Result(argv, 0, "\x1f".join(row) + "\n", "", 0)
        return plain(argv, timeout, input, env)

    runner.set_runner(with_eff)
    res = invoke(str(SPECS / "minimal.yaml"), "--wait")
    assert res.exit_code == 0, res.output
    line = [x for x in res.stderr.splitlines() if "GPU efficiency" in x]
    # one GPU at 90 % for the hour, seven never touched: 0.9 of 8 GPU-hours used
    assert line == [
        "ssubmit: job 4242 GPU efficiency: 11.2% of 8 GPU(s), 1/8 touched, 7 idle (<10%), "
        "0.900 of 8.000 GPU-h used, peak memory 60.0 of 80.0 GiB"
    ]
    res = invoke("status", "4242")
    assert res.exit_code == 0, res.output
    assert "efficiency 11.2% of 8 GPU(s), 1/8 touched" in res.stdout
    data = json.loads(invoke("status", "4242", "--json").stdout)
    assert data["efficiency"]["gpus_idle"] == 7 and data["efficiency"]["used_gpu_h"] == pytest.approx(0.9)
