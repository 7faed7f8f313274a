"""The sweep job's sbatch arguments and script: golden files and hostile values.

Regenerate the goldens with: SLURMKIT_UPDATE_GOLDENS=1 pytest tests/sweep/test_jobscript.py
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.sweep.jobscript import render_script, run_node_argv, sbatch_args

GOLDEN = Path(__file__).parent / "golden"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("SLURMKIT_UPDATE_GOLDENS"):
        path.write_text(text)
    expected = path.read_text() if path.exists() else ""
    if text != expected:
        diff = "".join(
            difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(path), "rendered")
        )
        pytest.fail(
            f"{name} differs from its golden file:\n{diff}\nRegenerate: "
            f"SLURMKIT_UPDATE_GOLDENS=1 pytest {__file__}"
        )


@pytest.fixture
def cfg(site_config):
    return lambda **sweep: site_config(**sweep).section("sweep")


def test_default_sweep_job_golden(cfg):
    c = cfg()
    args = sbatch_args("node1", c, "20260101T000000Z-42", "/var/log/slurmkit/sweep-%j.out")
    argv = run_node_argv(
        "node1",
        "20260101T000000Z-42",
        python="/opt/slurmkit/bin/python",
        config_path="/etc/slurmkit/slurmkit.yaml",
        gpu_model="h100",
    )
    check_golden("sweep-job-default.json", json.dumps({"sbatch": args, "argv": argv}, indent=2) + "\n")
    check_golden("sweep-job-default.sh", render_script("node1", "20260101T000000Z-42", argv))


def test_qos_requeue_and_extra_args(cfg):
    c = cfg(
        partition=None,
        qos="scavenger",
        account="ops",
        requeue=True,
        time_limit="1:30:00",
        extra_sbatch_args=["--reservation=maint"],
    )
    args = sbatch_args("gpu-a01", c, "r1", "/out/%j")
    assert args == [
        "--account=ops",
        "--comment=slurmkit-sweep run=r1",
        "--exclusive",
        "--job-name=slurmkit-sweep.gpu-a01",
        "--nodelist=gpu-a01",
        "--nodes=1",
        "--output=/out/%j",
        "--qos=scavenger",
        "--requeue",
        "--time=1:30:00",
        "--reservation=maint",
    ]


@pytest.mark.parametrize("hostile", ["a 0", 'a"=0"', "a'; echo foo", "a\n0", "ümlaut dir", "$(touch pwned)"])
def test_hostile_paths_reach_the_program_verbatim(tmp_path, hostile):
    """The rendered script passes every argument through unchanged and runs nothing else."""
    recorder = tmp_path / "args.json"
    py = f"import json,sys; json.dump(sys.argv[1:], open({str(recorder)!r}, 'w'))"
    argv = [sys.executable, "-c", py, hostile, "--config", f"/etc/{hostile}/slurmkit.yaml"]
    script = render_script("node1", "r1", argv, env={"SLURMKIT_TEST": hostile})
    res = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert json.loads(recorder.read_text()) == [hostile, "--config", f"/etc/{hostile}/slurmkit.yaml"]
    assert "foo" not in res.stdout and not (tmp_path / "pwned").exists()


def test_bad_time_limit_is_a_config_error(cfg):
    from slurmkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"sweep.time_limit: a sweep job needs a finite time limit"):
        cfg(time_limit="UNLIMITED")
