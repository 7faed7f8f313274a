"""Rendering: golden files, the one-torchrun-per-node contract, bash syntax, quoting."""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ssubmit_helpers import GOLDEN, REPO, SPECS, make_site, render_dict, render_file

SPEC_FILES = sorted(p.name for p in SPECS.glob("*.yaml"))
UPDATE = bool(os.environ.get("SLURMKIT_UPDATE_GOLDENS"))
REGENERATE = "SLURMKIT_UPDATE_GOLDENS=1 python -m pytest tests/submit/test_render.py -k golden"


def bash_n(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=10)


def golden_text(rendered) -> str:
    """The golden file: the script, plus the sbatch arguments that travel on argv.

    The checkout's own path is replaced by ``<repo>``, so the goldens hold wherever the
    repository is cloned (CI clones it elsewhere).
    """
    extra = "".join(f"# sbatch-argv: {a!r}\n" for a in rendered.sbatch_args)
    text = rendered.script + (
        "\n# ---- sbatch command-line arguments (not part of the script)\n" + extra if extra else ""
    )
    return text.replace(str(REPO), "<repo>")


@pytest.mark.parametrize("spec_name", SPEC_FILES)
def test_golden(spec_name):
    _, rendered = render_file(SPECS / spec_name)
    got = golden_text(rendered)
    golden = GOLDEN / (spec_name[:-5] + ".sbatch")
    if UPDATE or not golden.exists():
        if not UPDATE:
            pytest.fail(f"no golden file {golden}; create it with: {REGENERATE}")
        golden.write_text(got)
    want = golden.read_text()
    if got != want:
        diff = "".join(
            difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(golden), "rendered")
        )
        pytest.fail(
            f"rendered script differs from {golden}:\n{diff}\nIf the change is intended, "
            f"regenerate: {REGENERATE}"
        )


@pytest.mark.parametrize("spec_name", SPEC_FILES)
def test_rendered_scripts_are_valid_bash(spec_name):
    _, rendered = render_file(SPECS / spec_name)
    res = bash_n(rendered.script)
    assert res.returncode == 0, res.stderr


def _sbatch(script: str) -> list:
    return re.findall(r"^#SBATCH (\S+)$", script, re.M)


def test_one_torchrun_per_node():
    spec, rendered = render_file(SPECS / "ib-8gpu.yaml")
    s = rendered.script
    assert "--ntasks-per-node=1" in _sbatch(s)
    assert "--gres=gpu:h100:8" in _sbatch(s)
    assert "--cpus-per-task=64" in _sbatch(s)  # cpus_per_gpu 8 x 8 GPUs for the one task
    # srun: one task per node; torchrun starts the 8 workers.
    assert re.search(r"SK_SRUN=\(srun [^)]*--ntasks-per-node=1", s)
    assert "--nproc_per_node=8 --rdzv_backend=c10d" in s
    assert s.count("-m torch.distributed.run") == 1  # one launcher definition, used by both steps
    assert "--ntasks-per-node=8" not in s


def test_rendezvous_is_c10d_on_first_node_with_port_from_job_id_and_timeouts():
    _, rendered = render_file(SPECS / "minimal.yaml")
    s = rendered.script
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in s
    assert "resolve-head" in s
    assert "SK_RDZV_PORT=$(( 29510 + SLURM_JOB_ID % 490 ))" in s
    assert "29500" not in s
    assert "--rdzv_conf=join_timeout=300,read_timeout=60" in s
    assert '--rdzv_id="$SLURM_JOB_ID-$SLURMKIT_RESTART_COUNT"' in s


def test_signal_requeue_and_open_mode():
    _, rendered = render_file(SPECS / "minimal.yaml")
    opts = _sbatch(rendered.script)
    assert "--signal=B:USR2@90" in opts
    assert "--requeue" in opts
    assert "--open-mode=append" in opts
    assert "trap sk_on_signal USR2" in rendered.script
    _, cpu = render_file(SPECS / "cpu-example.yaml")
    assert "--no-requeue" in _sbatch(cpu.script)
    assert "--no-requeue" in cpu.script.split("SK_REQUEUE_ARGS=", 1)[1].splitlines()[0]


def test_sbatch_lines_are_sorted_and_extra_sbatch_comes_last():
    _, rendered = render_file(SPECS / "roce-container.yaml")
    opts = _sbatch(rendered.script)
    assert opts[-1] == "--reservation=maint"
    names = [o.split("=")[0] for o in opts[:-1]]
    assert names == sorted(names)
    assert "--gpus-per-node=4" in opts


def test_the_script_names_no_predictable_cache_directory():
    """The compiler caches are made private per node by node-launch (jobside.node_cache_dir);
    the script itself must not point them at ``${TMPDIR:-/tmp}/slurmkit-<job id>``, a name any
    user can pre-create (issue 25)."""
    _, rendered = render_file(SPECS / "minimal.yaml")
    s = rendered.script
    assert "TRITON_CACHE_DIR=" not in s and "TORCHINDUCTOR_CACHE_DIR=" not in s
    assert "SLURMKIT_NODE_TMP=" not in s and "/tmp/slurmkit-" not in s


def test_ib_profile_values_and_exact_hca_prefix():
    _, ib = render_file(SPECS / "ib-8gpu.yaml")
    assert "export NCCL_IB_TIMEOUT=22" in ib.script
    assert "export NCCL_MIN_NCHANNELS=16" in ib.script  # 8 GPUs per node
    assert "export NCCL_SOCKET_IFNAME=ib0" in ib.script
    assert "export NCCL_DEBUG=INFO" in ib.script
    assert "--hca auto" in ib.script  # detected per node at run time
    _, roce = render_file(SPECS / "roce-container.yaml")
    assert "export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in roce.script
    assert "export NCCL_IB_GID_INDEX=3" in roce.script
    assert "export NCCL_CROSS_NIC=1" in roce.script


def test_container_flags_go_on_srun():
    _, rendered = render_file(SPECS / "roce-container.yaml")
    srun_line = next(line for line in rendered.script.splitlines() if line.startswith("SK_SRUN=("))
    assert "--container-image=nvcr.io/nvidia/pytorch:24.05-py3" in srun_line
    assert "--container-mounts=/shared:/shared" in srun_line


def test_hostile_name_goes_to_sbatch_argv_not_an_sbatch_line():
    _, rendered = render_file(SPECS / "hostile.yaml")
    assert not any(o.startswith("--job-name") for o in _sbatch(rendered.script))
    name = 'a\'; echo pwned; $(touch /tmp/x) `id` "q"'
    assert f"--job-name={name}" in rendered.sbatch_args
    assert "# --job-name is passed on the sbatch command line" in rendered.script
    assert "--comment=a\n0" in rendered.sbatch_args


def test_user_env_overrides_profile_values():
    spec, rendered = render_dict(
        {"script": "/t.py", "fabric": "infiniband", "env": {"NCCL_IB_TIMEOUT": "18"}}
    )
    assert "export NCCL_IB_TIMEOUT=18" in rendered.script
    assert "export NCCL_IB_TIMEOUT=22" not in rendered.script


def test_site_template_override(tmp_path):
    tpl = tmp_path / "site.sbatch.j2"
    tpl.write_text("#!/bin/bash\n#SITE {{ name|shquote }} {{ nproc_per_node }}\n")
    _, rendered = render_dict({"script": "/t.py", "name": "x y"}, site=make_site(template=str(tpl)))
    assert rendered.script == "#!/bin/bash\n#SITE 'x y' 1\n"


def test_strict_undefined_rejects_unknown_template_variables(tmp_path):
    import jinja2

    tpl = tmp_path / "bad.j2"
    tpl.write_text("{{ no_such_variable }}\n")
    with pytest.raises(jinja2.UndefinedError):
        render_dict({"script": "/t.py"}, site=make_site(template=str(tpl)))


def test_render_is_deterministic_across_processes():
    """Two interpreters with different hash seeds render every spec byte for byte the same
    (two renders in one process would share the set and dict orders they got)."""
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from ssubmit_helpers import SPECS, render_file\n"
        "out = {}\n"
        "for p in sorted(SPECS.glob('*.yaml')):\n"
        "    r = render_file(p)[1]\n"
        "    out[p.name] = [r.script, list(r.sbatch_args)]\n"
        "print(json.dumps(out))\n"
    )
    outs = []
    for seed in ("1", "2"):
        res = subprocess.run(
            [sys.executable, "-c", code],
            env=dict(os.environ, PYTHONHASHSEED=seed),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(REPO),
        )
        assert res.returncode == 0, res.stderr
        outs.append(json.loads(res.stdout))
    assert sorted(outs[0]) == SPEC_FILES
    assert outs[0] == outs[1]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_hostile_spec_never_executes_anything(tmp_path):
    """Run the hostile script with stub Slurm commands and check nothing ran."""
    from ssubmit_helpers import run_with_stubs

    ckpt = str(tmp_path / "ck pt" / "$(id)") + "/{job_id}"
    spec, rendered = render_file(SPECS / "hostile.yaml", sets=[f"checkpoint.dir={ckpt}"])
    result = run_with_stubs(rendered.script, tmp_path)
    assert result.returncode == 0, result.stderr
    assert not os.path.exists("/tmp/x") or os.path.getmtime("/tmp/x") < result.started
    assert "pwned" not in result.stdout + result.stderr.replace("echo pwned", "")
    assert result.torchrun_argv[-len(spec["args"]) :] == spec["args"]
    assert result.env["MSG"] == spec["env"]["MSG"]
    assert result.env["SLURMKIT_JOB_NAME"] == spec["name"]
    assert result.env["SLURMKIT_CHECKPOINT_DIR"] == ckpt.replace("{job_id}", "4242")
    assert os.path.isdir(result.env["SLURMKIT_CHECKPOINT_DIR"] + "/.slurmkit")


def test_golden_mismatch_prints_diff_and_regenerate_command(tmp_path, monkeypatch):
    import test_render as me

    (tmp_path / "minimal.sbatch").write_text("#!/bin/bash\necho stale\n")
    monkeypatch.setattr(me, "GOLDEN", tmp_path)
    monkeypatch.setattr(me, "UPDATE", False)
    with pytest.raises(pytest.fail.Exception) as exc:
        me.test_golden("minimal.yaml")
    text = str(exc.value)
    assert "-echo stale" in text and "+#SBATCH --nodes=1" in text
    assert "SLURMKIT_UPDATE_GOLDENS=1" in text
