"""Sweeps: the task table (order, duplicates, limits), validation with lines, rendering as one
job array, and hostile parameter values reaching the command as single arguments (the
rendered script executed with stub srun/python, the real jobside picking the task)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ssubmit_helpers import render_dict, render_file, run_with_stubs

from slurmkit.errors import ConfigError
from slurmkit.submit import hparams
from slurmkit.submit.spec import validate_spec

BASE = {"script": "/opt/train.py", "preflight": {"allreduce": False}}


def sweep_spec(sweep, **extra):
    return {**BASE, "name": "sw", **extra, "sweep": sweep}


# --------------------------------------------------------------------------- the task table


def test_grid_order_is_product_in_written_order_last_axis_fastest_then_the_list():
    sets = hparams.parameter_sets(
        {"grid": {"lr": [0.0001, "3e-4"], "seed": [0, 1, 2]}, "list": [{"lr": "1e-2", "seed": 9}]}
    )
    assert sets == [
        {"lr": "0.0001", "seed": "0"},
        {"lr": "0.0001", "seed": "1"},
        {"lr": "0.0001", "seed": "2"},
        {"lr": "3e-4", "seed": "0"},
        {"lr": "3e-4", "seed": "1"},
        {"lr": "3e-4", "seed": "2"},
        {"lr": "1e-2", "seed": "9"},
    ]
    # the axes' written order decides, not their names
    flipped = hparams.parameter_sets({"grid": {"seed": [0, 1], "lr": ["a", "b"]}})
    assert [s["seed"] + s["lr"] for s in flipped] == ["0a", "0b", "1a", "1b"]


def test_values_as_text():
    assert [hparams.format_value(v) for v in (True, False, 3, 0.0003, 1e-05, "1e-4", "")] == [
        "true",
        "false",
        "3",
        "0.0003",
        "1e-05",
        "1e-4",
        "",
    ]
    for bad in (None, [1], {"a": 1}, float("nan"), float("inf"), "a\x00b"):
        with pytest.raises(ValueError):
            hparams.format_value(bad)


@pytest.mark.parametrize(
    "sweep, needle",
    [
        ({"grid": {"lr": []}}, "axis 'lr' is empty"),
        ({}, "needs a non-empty grid or list"),
        ({"grid": {"lr": 3}}, "must be a list of values"),
        ({"grid": {"a-b": [1]}}, "is not an identifier"),
        ({"grid": {"lr": [1, 1]}}, "task 1 repeats task 0 (lr=1)"),
        ({"grid": {"lr": [1]}, "list": [{"lr": 1}]}, "task 1 repeats task 0"),
        ({"list": [{"a": 1, "b": 2}, {"b": 2, "a": 1}]}, "task 1 repeats task 0"),
        ({"list": [{}]}, "non-empty mapping"),
        ({"list": [{"a": None}]}, "got null"),
        ({"grid": {"SLURM_X": [1]}, "pass_as": "env"}, "the job's own variables"),
    ],
)
def test_bad_sweeps_are_refused(sweep, needle):
    with pytest.raises(hparams.SweepError) as err:
        hparams.parameter_sets(sweep)
    assert needle in str(err.value)


def test_task_limit_is_checked_before_expanding():
    axis = list(range(1000))
    with pytest.raises(hparams.SweepError, match="100000"):
        hparams.parameter_sets({"grid": {"a": axis, "b": axis, "c": axis}})  # 10^9, refused at once
    assert len(hparams.parameter_sets({"grid": {"a": list(range(100)), "b": list(range(1000))}})) == 100_000
    with pytest.raises(hparams.SweepError):
        hparams.parameter_sets({"grid": {"a": list(range(100)), "b": list(range(1000))}, "list": [{"a": -1}]})


def test_pass_as_modes():
    args = hparams.task(0, {"lr": "1", "seed": "2"}, name="n", pass_as="args", base_args=["--x"])
    assert args.args == ["--x", "--lr", "1", "--seed", "2"] and "lr" not in args.env
    env = hparams.task(3, {"LR": "1"}, name="n", pass_as="env", base_args=["--x"])
    assert env.args == ["--x"] and env.env["LR"] == "1" and env.run_name == "n-3"
    assert env.env["SLURMKIT_SWEEP_INDEX"] == "3" and json.loads(env.env["SLURMKIT_SWEEP_PARAMS"]) == {
        "LR": "1"
    }
    tpl = hparams.task(0, {"lr": "1"}, name="n", pass_as="template", base_args=["--lr={lr}", "{{lr}}", "{x"])
    assert tpl.args == ["--lr=1", "{lr}", "{x"]


def test_template_mode_checks_placeholders_both_ways():
    with pytest.raises(hparams.SweepError, match="appears in no args item"):
        hparams.tasks({"grid": {"lr": [1], "seed": [0]}, "pass_as": "template"}, name="n", base_args=["{lr}"])
    with pytest.raises(hparams.SweepError, match="has no 'wd'"):
        hparams.tasks({"grid": {"lr": [1]}, "pass_as": "template"}, name="n", base_args=["{lr}", "{wd}"])


def test_table_round_trip_and_bad_indices():
    sweep = {"grid": {"lr": ["a b", "c\nd"]}}
    text = hparams.table_json(sweep, name="n", base_args=["--k"])
    assert "\n" not in text and text.isascii()
    assert hparams.task_from_table(text, "1").args == ["--k", "--lr", "c\nd"]
    for index, needle in ((None, "must run as a job array"), ("2", "not in the sweep"), ("-1", "job array")):
        with pytest.raises(hparams.SweepError, match=needle):
            hparams.task_from_table(text, index)
    with pytest.raises(hparams.SweepError, match="unknown version"):
        hparams.task_from_table(json.dumps({"version": 99}), "0")


# --------------------------------------------------------------------------- the spec


def test_spec_errors_name_the_file_line_and_key(write_spec):
    path = write_spec("script: t.py\nsweep:\n  grid:\n    lr: [1, 2]\n    seed: []\n")
    with pytest.raises(ConfigError) as err:
        render_file(path)
    assert (
        str(err.value)
        == f"{path}:5: sweep.grid.seed: axis 'seed' is empty: a grid with an empty axis has no tasks"
    )


@pytest.mark.parametrize(
    "extra, needle",
    [
        ({"array": "0-3"}, "array: set array or sweep, not both"),
        ({"output": "log.out"}, "output: 'log.out' has neither %a nor %j"),
        ({"checkpoint": {"dir": "/c/{array_job_id}"}}, "checkpoint.dir: '/c/{array_job_id}' has neither"),
    ],
)
def test_sweep_combinations_refused(extra, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace("{", r"\{").replace("}", r"\}")):
        validate_spec(sweep_spec({"grid": {"lr": [1]}}, **extra), "s.yaml")


def test_array_placeholders_need_an_array():
    with pytest.raises(ConfigError, match="need a job array"):
        validate_spec({**BASE, "checkpoint": {"dir": "/c/{array_task_id}"}}, "s.yaml")
    ok = validate_spec({**BASE, "array": "0-3", "checkpoint": {"dir": "/c/{array_task_id}"}}, "s.yaml")
    assert ok["sweep"] is None


def test_sweep_renders_one_throttled_array_with_per_task_log_and_checkpoint_dir():
    spec, rendered = render_dict(sweep_spec({"grid": {"lr": [1, 2], "seed": [0, 1, 2]}, "max_parallel": 2}))
    script = rendered.script
    assert "#SBATCH --array=0-5%2\n" in script and "#SBATCH --output=slurmkit-%A_%a.out\n" in script
    assert script.count("#SBATCH --array") == 1
    assert (
        'SLURMKIT_CHECKPOINT_DIR=/shared/ckpt/"${SK_USER}"/"${SLURM_ARRAY_JOB_ID}"_"${SLURM_ARRAY_TASK_ID}"'
        in script
    )
    assert "<<'SLURMKIT_SWEEP_TABLE'" in script and '/opt/train.py "${SK_TASK_ARGS[@]}"' in script
    assert rendered.settings["sweep"] == {
        "array": "0-5%2",
        "pass_as": "args",
        "max_parallel": 2,
        "tasks": 6,
        "output": "slurmkit-%A_%a.out",
    }
    # requeue, exclude and release address the task, never the whole array
    assert 'SK_JOB_REF="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"' in script
    assert 'SK_REQUEUE_ARGS=(--job-id "$SK_JOB_REF"' in script
    assert subprocess.run(["bash", "-n"], input=script, text=True, timeout=10).returncode == 0
    _, unthrottled = render_dict(sweep_spec({"list": [{"a": 1}]}))
    assert "#SBATCH --array=0-0\n" in unthrottled.script


def test_plain_job_renders_no_sweep_block():
    _, rendered = render_dict(BASE)
    assert "SLURMKIT_SWEEP_TABLE" not in rendered.script and "SK_TASK_ARGS" not in rendered.script
    assert "--array" not in rendered.script


# --------------------------------------------------------------------------- end to end, hostile values

#: pieces a hostile value is made of: shell syntax, quotes, newlines, Unicode line separators, and
#: the here-document's own delimiter on a line of its own
HOSTILE_PIECES = list("ab $`'\"\\;|&(){}[]*?!#~<>\n\t=%") + [
    "é",
    "\u2028",
    "\nSLURMKIT_SWEEP_TABLE\n",
    "$(touch PWNED)",
]
hostile = st.lists(st.sampled_from(HOSTILE_PIECES), max_size=12).map("".join)


def run_task(spec_dict, index, tmp):
    spec_dict = {**spec_dict, "checkpoint": {"dir": f"{tmp}/ck/{{array_job_id}}_{{array_task_id}}"}}
    _, rendered = render_dict(spec_dict)
    return run_with_stubs(
        rendered.script,
        Path(tmp),
        extra_env={"SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": str(index)},
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(hostile, min_size=2, max_size=3, unique=True), mode=st.sampled_from(hparams.PASS_AS))
@example(values=["a", '$(touch PWNED) `touch PWNED2` it\'s "q"\nSLURMKIT_SWEEP_TABLE\n$HOME'], mode="args")
@example(values=["a", "$(touch PWNED) ${HOME} \\"], mode="env")
def test_hostile_values_reach_the_command_as_one_argument_never_evaluated(values, mode):
    args = {"args": ["--fixed", "$(id)"], "env": ["--fixed"], "template": ["--v={v}", "{v}"]}[mode]
    name = "V" if mode == "env" else "v"
    spec_dict = {**BASE, "args": args, "sweep": {"grid": {name: values}, "pass_as": mode}}
    index = len(values) - 1
    value = values[index]
    with tempfile.TemporaryDirectory() as tmp:
        result = run_task(spec_dict, index, tmp)
        assert result.returncode == 0, result.stderr
        tail = {
            "args": ["/opt/train.py", "--fixed", "$(id)", "--v", value],
            "env": ["/opt/train.py", "--fixed"],
            "template": ["/opt/train.py", f"--v={value}", value],
        }[mode]
        assert result.torchrun_argv[-len(tail) :] == tail
        if mode == "env":
            assert result.env["V"] == value
        assert result.env["SLURMKIT_RUN_NAME"] == f"spec-{index}"
        assert json.loads(result.env["SLURMKIT_SWEEP_PARAMS"]) == {name: value}
        assert result.env["SLURMKIT_CHECKPOINT_DIR"] == f"{tmp}/ck/4240_{index}"
        assert not list(Path(tmp).glob("**/PWNED*"))


def test_a_task_outside_the_table_stops_the_job(tmp_path):
    result = run_task({**BASE, "sweep": {"grid": {"v": [1, 2]}}}, 2, tmp_path)
    assert result.returncode == 1
    assert "array task 2 is not in the sweep (tasks 0-1)" in result.stderr
    assert "no parameters for array task 2" in result.stderr
    assert result.torchrun_argv == []  # nothing ran


def test_jobside_sweep_task_writes_nul_separated_words(tmp_path):
    table = hparams.table_json({"grid": {"v": ["a\nb c"]}, "pass_as": "args"}, name="n", base_args=[])
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurmkit.submit.jobside",
            "sweep-task",
            "--index",
            "0",
            "--out-dir",
            str(tmp_path),
        ],
        input=table,
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "sweep-args").read_bytes() == b"--v\0a\nb c\0"
    env = (tmp_path / "sweep-env").read_bytes().decode().split("\0")[:-1]
    assert env[0] == "SLURMKIT_RUN_NAME=n-0" and env[1] == "SLURMKIT_SWEEP_INDEX=0"


def test_torchrun_parses_parameters_named_like_its_own_options():
    """torchrun's argparse takes abbreviations: without the ``--`` before the program, a task's
    ``--n 0`` stops it ("ambiguous option") and ``--nnodes 9`` would be taken for its own."""
    pytest.importorskip("torch")
    from torch.distributed.run import get_args_parser

    for head in ({"script": "/opt/t.py"}, {"module": "pkg.train"}, {"command": ["bash", "-c", "x"]}):
        spec = validate_spec(
            {**head, "args": ["--", "z"], "sweep": {"grid": {"n": [0], "nnodes": [9]}}}, "s.yaml"
        )
        task = hparams.tasks(spec["sweep"], name="s", base_args=spec["args"])[0]
        from slurmkit.submit.render import _launch_argv

        launch = _launch_argv({**spec, "args": task.args})
        parsed = get_args_parser().parse_args(["--nnodes=1", "--nproc_per_node=2", *launch])
        assert parsed.nnodes == "1"
        want_program = head.get("script") or head.get("module") or "bash"
        assert parsed.training_script == want_program
        tail = ["--", "z", "--n", "0", "--nnodes", "9"]
        assert parsed.training_script_args[-len(tail) :] == tail
