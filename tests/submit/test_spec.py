"""Spec loading and validation: every bad input is one line naming file:line and key."""

from __future__ import annotations

import pytest
from ssubmit_helpers import SPECS

from slurmkit.errors import ConfigError
from slurmkit.submit.spec import check_against_cluster, load_spec, validate_spec


def load_text(write_spec, text, **kw):
    return load_spec(str(write_spec(text)), **kw)


def error_of(write_spec, text, **kw) -> str:
    with pytest.raises(ConfigError) as exc:
        load_text(write_spec, text, **kw)
    assert exc.value.exit_code == 2
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_defaults_and_derived_values(write_spec):
    spec = load_text(write_spec, "script: /t.py\ngpus_per_node: 4\n")
    assert spec["name"] == "train"  # from the file name
    assert spec["nodes"] == 1
    assert spec["nproc_per_node"] == 4
    assert spec["requeue"] == {
        "enabled": True,
        "max_retries": 3,
        "max_node_failures": 2,
        "recheck_on_failure": True,
        "signal": "USR2",
        "grace": 90,
    }
    assert spec["preflight"]["allreduce"] is True


def test_unknown_key_lists_valid_keys_with_line(write_spec):
    msg = error_of(write_spec, "script: /t.py\nnodez: 2\n")
    assert "train.yaml:2:" in msg
    assert "unknown key 'nodez'" in msg
    assert "nodes" in msg and "gpus_per_node" in msg


def test_unknown_nested_key_names_the_section(write_spec):
    msg = error_of(write_spec, "script: /t.py\nrequeue:\n  retries: 3\n")
    assert "train.yaml:3:" in msg and "requeue:" in msg and "max_retries" in msg


def test_type_error_gives_file_line_and_key_path(write_spec):
    msg = error_of(write_spec, "script: /t.py\nrequeue:\n  max_retries: lots\n")
    assert msg.startswith(
        str(write_spec("x").parent / "train.yaml") + ":3: requeue.max_retries: expected an integer"
    )


def test_negative_nodes(write_spec):
    msg = error_of(write_spec, "script: /t.py\nnodes: -2\n")
    assert ":2: nodes: must be >= 1" in msg


@pytest.mark.parametrize("bad", ["abc", "1:2:3:4", "-5", "2 hours", "60:", " 1:00:00"])
def test_time_limits_slurm_would_reject(write_spec, bad):
    msg = error_of(write_spec, f"script: /t.py\ntime: '{bad}'\n")
    assert "time:" in msg and "bad time limit" in msg


# Slurm's time_str2mins takes fields past their clock range ("25:99", "1-25:00", "0:90:00")
@pytest.mark.parametrize(
    "good", ["30", "1:30:00", "2-12", "7-00:00:00", "UNLIMITED", "25:99", "1-25:00", "0:90:00"]
)
def test_time_limits_slurm_accepts(write_spec, good):
    assert load_text(write_spec, f"script: /t.py\ntime: '{good}'\n")["time"] == good


@pytest.mark.parametrize("name", ["A;B", "1X", "A-B", "A B", "$(id)", ""])
def test_env_names_must_be_identifiers(write_spec, name):
    msg = error_of(write_spec, f"script: /t.py\nenv:\n  '{name}': x\n")
    assert "env:" in msg and "not a shell identifier" in msg


def test_malformed_yaml(write_spec):
    msg = error_of(write_spec, "script: /t.py\nnodes: [1, 2\n")
    assert "invalid YAML" in msg and "train.yaml:" in msg


def test_not_a_mapping(write_spec):
    assert "must be a mapping" in error_of(write_spec, "- a\n- b\n")


@pytest.mark.parametrize(
    "text,needle",
    [
        ("script: /t.py\ncommand: [x]\n", "exactly one of script, module or command"),
        ("nodes: 1\n", "exactly one of script, module or command"),
        ("script: /t.py\ncpus_per_task: 2\ncpus_per_gpu: 2\ngpus_per_node: 1\n", "not both"),
        ("script: /t.py\ndevice: cuda\n", "device: cuda needs gpus_per_node"),
        ("script: /t.py\ngpus_per_node: 2\nnproc_per_node: 4\ndevice: cuda\n", "more than gpus_per_node"),
        ("script: /t.py\ntime: '1'\n", "grace 90 s is not shorter than the time limit"),
        ("script: /t.py\nrendezvous: {port_min: 30000, port_max: 29000}\n", "below port_min"),
        ("script: /t.py\nextra_sbatch: ['--ntasks-per-node=8']\n", "may not set --ntasks-per-node"),
        ("script: /t.py\nextra_sbatch: ['reservation=x']\n", "must be an sbatch option"),
        ("script: /t.py\nnccl: {hca: 'mlx5_0:1;rm'}\n", "nccl.hca must be"),
        ("script: /t.py\nrequeue: {signal: KILL}\n", "must be one of"),
        ("script: /t.py\nfabric: myrinet\n", "must be one of"),
        ("script: /t.py\npartition: 'gpu;rm'\n", "is not a partition name"),
        ("script: /t.py\nmem: 64GB\n", "is not a memory size"),
        ("script: /t.py\narray: '1-x'\n", "is not an array spec"),
        ("script: /t.py\nenv: {A: [1, 2]}\n", "env values must be strings"),
        ("command: 'a \"b'\n", "cannot split command"),
    ],
)
def test_impossible_or_invalid_combinations(write_spec, text, needle):
    assert needle in error_of(write_spec, text)


def test_command_string_is_split_and_hostile_values_survive(write_spec):
    spec = load_text(write_spec, "command: \"python -c 'print(1)'\"\nenv: {N: 3, B: true}\n")
    assert spec["command"] == ["python", "-c", "print(1)"]
    assert spec["env"] == {"N": "3", "B": "1"}


def test_site_defaults_then_spec_then_set(write_spec):
    site = {"partition": "gpu", "account": "site", "requeue": {"max_retries": 7}}
    spec = load_text(
        write_spec,
        "script: /t.py\naccount: mine\n",
        site_defaults=site,
        sets=["nodes=4", "requeue.grace=120", "env.MSG=hello world"],
    )
    assert spec["partition"] == "gpu"  # site default
    assert spec["account"] == "mine"  # spec beats site
    assert spec["nodes"] == 4  # --set beats both
    assert spec["requeue"]["max_retries"] == 7 and spec["requeue"]["grace"] == 120
    assert spec["env"] == {"MSG": "hello world"}


def test_bad_site_defaults_name_the_site_file(write_spec):
    with pytest.raises(ConfigError) as exc:
        load_text(
            write_spec, "script: /t.py\n", site_defaults={"nodez": 1}, site_path="/etc/slurmkit/slurmkit.yaml"
        )
    assert str(exc.value).startswith("/etc/slurmkit/slurmkit.yaml") and "submit.defaults" in str(exc.value)


def test_bad_set_value_is_a_spec_error(write_spec):
    assert "nodes: expected an integer" in error_of(write_spec, "script: /t.py\n", sets=["nodes=many"])
    assert "expected KEY=VALUE" in error_of(write_spec, "script: /t.py\n", sets=["nodes"])


def test_relative_script_resolves_against_spec_dir(write_spec):
    p = write_spec("script: train.py\n")
    (p.parent / "train.py").write_text("")
    assert load_spec(str(p))["script"] == str(p.parent / "train.py")
    q = write_spec("script: elsewhere.py\n", name="other.yaml")
    assert load_spec(str(q))["script"] == "elsewhere.py"


def test_all_example_specs_load():
    from ssubmit_helpers import REPO

    paths = [*SPECS.glob("*.yaml"), *(REPO / "job_templates" / "examples").glob("*.yaml")]
    assert len(paths) >= 6
    for path in paths:
        spec = load_spec(str(path))  # raises ConfigError naming file:line on any problem
        assert spec["name"], path


SINFO_ROWS = [
    {"name": "node1", "gres": "gpu:h100:8(S:0-1)", "partition": "debug*"},
    {"name": "node2", "gres": "gpu:h100:8", "partition": "debug*"},
]


def test_gpus_per_node_above_partition_is_refused():
    spec = validate_spec({"script": "/t", "gpus_per_node": 16})
    assert "gpus_per_node 16 is more than any node" in check_against_cluster(spec, SINFO_ROWS)
    spec = validate_spec({"script": "/t", "gpus_per_node": 8, "gpu_type": "a100"})
    assert "of type a100" in check_against_cluster(spec, SINFO_ROWS)
    spec = validate_spec({"script": "/t", "gpus_per_node": 8, "nodes": 3})
    assert "nodes 3 is more than" in check_against_cluster(spec, SINFO_ROWS)


def test_fitting_request_and_unknown_cluster_pass():
    assert (
        check_against_cluster(validate_spec({"script": "/t", "gpus_per_node": 8, "nodes": 2}), SINFO_ROWS)
        is None
    )
    assert check_against_cluster(validate_spec({"script": "/t", "gpus_per_node": 64}), []) is None


# --------------------------------------------------------------- GPUs only from the spec (issue 25)

GPU_SPELLINGS = [
    (["--gpus-per-socket=4"], "--gpus-per-socket", "gpus_per_node"),
    (["--gpus-per-socket", "4"], "--gpus-per-socket", "gpus_per_node"),
    (["--gpus-per-s=4"], "--gpus-per-socket", "gpus_per_node"),  # abbreviations getopt_long accepts
    (["--gpus-per-so", "4"], "--gpus-per-socket", "gpus_per_node"),
    (["--gpus=8"], "--gpus", "gpus_per_node"),
    (["--gpus", "8"], "--gpus", "gpus_per_node"),
    (["-G", "8"], "--gpus", "gpus_per_node"),
    (["-G8"], "--gpus", "gpus_per_node"),
    (["-HG8"], "--gpus", "gpus_per_node"),  # bundled behind --hold
    (["--gpus-per-node=a100:2"], "--gpus-per-node", "gpus_per_node"),
    (["--gpus-per-n", "2"], "--gpus-per-node", "gpus_per_node"),
    (["--gpus-per-task=1"], "--gpus-per-task", "gpus_per_node"),
    (["--gpus-per-t=1"], "--gpus-per-task", "gpus_per_node"),
    (["--gres=gpu:4"], "--gres", "gpus_per_node"),
    (["--gres", "gpu:h100:4"], "--gres", "gpus_per_node"),
    (["--gres=shard:2"], "--gres", "gpus_per_node"),
    (["--tres-per-task=gres/gpu:2"], "--tres-per-task", "gpus_per_node"),
    (["--tres-per-task", "gres/gpu:2"], "--tres-per-task", "gpus_per_node"),
    (["--tres-per=gres/gpu:2"], "--tres-per-task", "gpus_per_node"),
    (["--cpus-per-gpu=8"], "--cpus-per-gpu", "cpus_per_gpu"),
    (["--cpus-per-g", "8"], "--cpus-per-gpu", "cpus_per_gpu"),
    (["--mem-per-gpu=80G"], "--mem-per-gpu", "mem"),
    (["--mem-per-g=80G"], "--mem-per-gpu", "mem"),
    (["--exclusive"], "--exclusive", "exclusive"),  # "allocated all CPUs and GRES" (man sbatch)
    (["--exclusive=user"], "--exclusive", "exclusive"),
    (["--exclusi"], "--exclusive", "exclusive"),
]


@pytest.mark.parametrize("extra,flag,key", GPU_SPELLINGS, ids=[" ".join(x[0]) for x in GPU_SPELLINGS])
def test_extra_sbatch_cannot_allocate_gpus_in_any_spelling(write_spec, extra, flag, key):
    import json

    msg = error_of(write_spec, f"script: /t.py\ngpus_per_node: 0\nextra_sbatch: {json.dumps(extra)}\n")
    assert f"may not set {flag}," in msg and f"set {key}" in msg and "train.yaml:3: extra_sbatch" in msg


def test_gpu_options_that_allocate_nothing_stay_allowed(write_spec):
    spec = load_text(
        write_spec,
        "script: /t.py\ngpus_per_node: 2\nextra_sbatch: [--gpu-bind=closest, '--gpu-freq=high', "
        "--gres-flags=enforce-binding]\n",
    )
    assert spec["extra_sbatch"] == ["--gpu-bind=closest", "--gpu-freq=high", "--gres-flags=enforce-binding"]


def ssubmit_dry_run(path):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.ssubmit", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ssubmit_refuses_a_gpu_option_with_exit_2_and_one_line(write_spec):
    res = ssubmit_dry_run(
        write_spec("script: /t.py\ngpus_per_node: 0\nextra_sbatch: ['--gpus-per-socket=4']\n")
    )
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--gpus-per-socket" in lines[0] and "gpus_per_node" in lines[0], res.stderr
    assert "#SBATCH" not in res.stdout


# --------------------------------------------------------------- spec edge cases (issue 25)


@pytest.mark.parametrize(
    "value", ["-1", "'-1'", "0", "'0'", "'00:00:00'", "'0-0'", "'0:0'", "'0-00:00:00'", "'0-'"]
)
def test_time_that_slurm_would_read_as_no_limit_is_refused(write_spec, value):
    msg = error_of(write_spec, f"script: /t.py\ntime: {value}\n")
    assert "train.yaml:2: time:" in msg and "no time limit" in msg and "UNLIMITED" in msg


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "'-5'", "'1.5'", "1.5", "'1e3'", "' 5'", "true"])
def test_time_nan_inf_negative_and_malformed_are_refused(write_spec, value):
    assert "train.yaml:2: time:" in error_of(write_spec, f"script: /t.py\ntime: {value}\n")


@pytest.mark.parametrize(
    "value,minutes", [("UNLIMITED", None), ("infinite", None), ("'0:30'", 1), ("'0-1'", 60), ("1440", 1440)]
)
def test_explicit_unlimited_and_positive_times_pass(write_spec, value, minutes):
    from slurmkit.slurm.parse import parse_time_limit

    spec = load_text(write_spec, f"script: /t.py\ntime: {value}\nrequeue: {{grace: 10}}\n")
    assert parse_time_limit(spec["time"]) == minutes


@pytest.mark.parametrize(
    "text,where",
    [
        ('name: "a\\0b"\n', "train.yaml:2: name:"),
        ('env: {X: "a\\0b"}\n', "train.yaml:2: env.X:"),
        ('env:\n  X: ok\n  Y: "\\0"\n', "train.yaml:4: env.Y:"),
        ('output: "o\\0.out"\n', "train.yaml:2: output:"),
        ('args: [ok, "a\\0"]\n', "train.yaml:2: args:"),
        ('nccl:\n  env: {NCCL_X: "\\0"}\n', "train.yaml:3: nccl.env.NCCL_X:"),
        ('"k\\0": 1\n', "train.yaml:2: 'k\\x00':"),
    ],
)
def test_an_escaped_nul_is_a_spec_error_naming_file_line_and_key(write_spec, text, where):
    msg = error_of(write_spec, "script: /t.py\n" + text)
    assert where in msg and "NUL" in msg


def test_ssubmit_exits_2_not_70_on_an_escaped_nul(write_spec, tmp_path):
    """Old: the NUL reached sbatch's argv and ssubmit ended in an internal error (exit 70).
    A stand-in sbatch on PATH, so that the run would get as far as submitting."""
    import os
    import subprocess
    import sys

    stub = tmp_path / "bin"
    stub.mkdir()
    for tool in ("sbatch", "sinfo"):
        (stub / tool).write_text("#!/bin/sh\necho 12345\n")
        os.chmod(stub / tool, 0o755)
    env = dict(os.environ, PATH=f"{stub}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    env.pop("SLURMKIT_CONFIG", None)
    for body in ('name: "a\\0b"\n', 'output: "o\\0.out"\n', 'workdir: "/tmp/\\0"\n'):
        path = write_spec("script: /t.py\n" + body)
        res = subprocess.run(
            [sys.executable, "-m", "slurmkit.cli.ssubmit", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert res.returncode == 2, (body, res.returncode, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "NUL" in lines[0] and str(path) in lines[0], res.stderr
