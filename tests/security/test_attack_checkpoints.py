"""Attack: run code as another user through their checkpoint directory.

Checkpoint directories used to be ``<shared root>/<job id>``: predictable (job ids are
sequential), in a world-writable tree, and reused when they already existed; the example
trainer then unpickled ``latest.pt`` with ``weights_only=False``. The attacker learns the
next job id, creates the victim's directory and plants a pickle whose unpickling runs a
command as the victim.

Now the default is ``<root>/<user>/<job id>``, created 0700 by the job, and a directory
the user does not own, or that others could write or swap, stops the job with exit 78
before anything runs; the trainer loads with ``weights_only=True`` and refuses a file it
does not own.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Optional

import pytest

from tests.health.conftest import REPO

TRAINER_DIR = REPO / "job_templates" / "examples" / "tiny_gpt"
REFUSED = 78


class _Payload:
    """Unpickling this runs ``touch <marker>``: what an attacker plants as latest.pt."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _plant(attacker: str, directory: Path, marker: Path, must_succeed: bool = True) -> int:
    """As the attacker: create ``directory`` (mode 0777, like a careless shared tree) with a
    malicious latest.pt in it; return the exit code."""
    blob = pickle.dumps(_Payload(str(marker)))
    code = (
        "import os,sys\nd=sys.argv[1]\nos.makedirs(d, exist_ok=True)\nos.chmod(d, 0o777)\n"
        "open(os.path.join(d,'latest.pt'),'wb').write(sys.stdin.buffer.read())\n"
    )
    res = subprocess.run(
        ["runuser", "-u", attacker, "--", "/usr/bin/python3", "-c", code, str(directory)],
        input=blob,
        capture_output=True,
        timeout=60,
    )
    if must_succeed:
        assert res.returncode == 0, res.stderr
    return res.returncode


@pytest.fixture
def dropbox():
    d = tempfile.mkdtemp(prefix="sk-sec-a-ck-")
    os.chmod(d, 0o1777)  # a world-writable sticky tree, like a cluster's shared scratch
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def _jobside_as(user: str, *args: str) -> subprocess.CompletedProcess:
    """The real jobside command as the user runs it in the job (system python: the test venv
    is not readable by other users; jobside needs only the standard library)."""
    return subprocess.run(
        [
            "runuser",
            "-u",
            user,
            "--",
            "/usr/bin/env",
            f"PYTHONPATH={REPO}",
            "/usr/bin/python3",
            "-m",
            "slurmkit.submit.jobside",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_checkpoint_directory_the_attacker_prepared_is_refused(unprivileged_users, dropbox):
    attacker, victim = unprivileged_users
    marker = dropbox / "pwned"
    _plant(attacker, dropbox / victim / "1234", marker)  # the attacker made <root>/<victim> too
    res = _jobside_as(victim, "checkpoint-dir", str(dropbox / victim / "1234"))
    assert res.returncode == REFUSED, res.stderr
    assert res.stderr.count("\n") == 1 and "refusing the checkpoint directory" in res.stderr
    # a directory that is the victim's but that others may write is refused too
    own = dropbox / "own-open"
    subprocess.run(
        ["runuser", "-u", victim, "--", "/bin/mkdir", "-m", "0777", str(own)], check=True, timeout=30
    )
    subprocess.run(["chmod", "0777", str(own)], check=True, timeout=30)
    assert _jobside_as(victim, "checkpoint-dir", str(own)).returncode == REFUSED
    # the legitimate case: created private, accepted
    fresh = dropbox / "fresh-user-dir" / "77"
    subprocess.run(["runuser", "-u", victim, "--", "/bin/mkdir", str(fresh.parent)], check=True, timeout=30)
    ok = _jobside_as(victim, "checkpoint-dir", str(fresh))
    assert ok.returncode == 0, ok.stderr
    assert (fresh.stat().st_mode & 0o777) == 0o700 and fresh.stat().st_uid == fresh.parent.stat().st_uid
    assert not marker.exists()


def test_the_example_trainer_never_unpickles_code(tmp_path):
    """The trainer saves a checkpoint that loads with weights_only=True, refuses a planted
    pickle even in its own directory, and refuses a file owned by someone else."""
    pytest.importorskip("torch")
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil"
    evil.mkdir(mode=0o700)
    (evil / "latest.pt").write_bytes(pickle.dumps(_Payload(str(marker))))
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    shutil.copy(evil / "latest.pt", other / "latest.pt")
    os.chown(other / "latest.pt", 65534, 65534)
    script = textwrap.dedent(f"""
        import sys, argparse
        from pathlib import Path
        sys.argv = ["train.py"]
        sys.path.insert(0, {str(TRAINER_DIR)!r})
        import torch, train
        args = train.parse_args(["--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--seq-len", "16",
                                 "--attention", "sdpa"])
        model = train.GPT(train.GPTConfig(seq_len=16, n_layer=1, n_head=2, n_embd=16, attention="sdpa"))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ck = Path({str(tmp_path / "good")!r})
        ck.mkdir(mode=0o700)
        train.save_checkpoint(ck, model, opt, 5, args)
        assert train.load_checkpoint(ck / "latest.pt", model, opt, torch.device("cpu")) == 5
        for bad in ({str(evil)!r}, {str(other)!r}):
            try:
                train.load_checkpoint(Path(bad) / "latest.pt", model, opt, torch.device("cpu"))
            except BaseException as exc:  # UnpicklingError, or SystemExit for a foreign file
                print("refused", bad, type(exc).__name__)
            else:
                print("LOADED", bad)
        """)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO / "kernels"), str(REPO)]),
        CUDA_VISIBLE_DEVICES="",
        TRITON_INTERPRET="1",
        TRITON_CACHE_DIR=str(tmp_path / "triton"),
    )
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not marker.exists(), "loading a checkpoint ran the attacker's code"
    assert res.stdout.count("refused") == 2 and "LOADED" not in res.stdout, res.stdout


# --------------------------------------------------------------- devcluster, real job


def _render_for(dc, dropbox: Path, user_tag: str, checkpoint_root: Optional[Path] = None):
    """The rendered ssubmit script for a one-node CPU job, with the devcluster's site config
    (its checkpoint root, or ``checkpoint_root``). Rendered here (the victim cannot run the test venv) and
    submitted with sbatch as the victim, as ssubmit does."""
    from slurmkit.config import load_site_config
    from slurmkit.submit.render import render
    from slurmkit.submit.spec import validate_spec

    cfg = load_site_config(str(dc.config_path))
    spec = validate_spec(
        {
            "name": f"ckpt-{user_tag}",
            "nodes": 1,
            "device": "cpu",
            "time": "5",
            "fabric": "none",
            "python": "/usr/bin/python3",
            "env": {"PYTHONPATH": str(REPO)},
            "script": "/bin/true",
            "preflight": {"allreduce": False},
            "requeue": {"enabled": False},
            "output": str(dropbox / "ckpt-%j.out"),
            "workdir": str(dropbox),
        }
    )
    site = dict(cfg.section("submit"))
    if checkpoint_root is not None:
        site["checkpoint_root"] = str(checkpoint_root)
    return render(spec, site=site, paths=cfg.section("paths")), site


@pytest.mark.devcluster
def test_victims_job_refuses_the_checkpoint_dir_the_attacker_planted(
    devcluster, unprivileged_users, shared_dropbox
):
    dc = devcluster
    dropbox = shared_dropbox  # the job sees it (its /tmp is private)
    attacker, victim = unprivileged_users
    dc.associate(attacker, victim)
    # The devcluster's own checkpoint root is root's 0755 (docs/security.md): there the
    # attacker cannot even create a directory.
    default_root = Path(_render_for(dc, dropbox, victim)[1]["checkpoint_root"])
    assert _plant(attacker, default_root / "99999", dropbox / "never", must_succeed=False) != 0
    # A careless site whose checkpoint root is a world-writable shared tree: the job itself
    # must refuse what the attacker prepared there.
    root = dropbox / "checkpoints"
    root.mkdir()
    os.chmod(root, 0o1777)
    rendered, site = _render_for(dc, dropbox, victim, checkpoint_root=root)
    # The attacker learns the next job id by submitting one of his own.
    probe = dc.submit("#!/bin/sh\ntrue\n", ["--output=/dev/null"], user=attacker)
    marker = dropbox / "pwned"
    planted = []
    for nxt in range(int(probe) + 1, int(probe) + 4):
        for d in (root / str(nxt), root / victim / str(nxt)):  # old layout and the per-user one
            _plant(attacker, d, marker)
            planted.append(d)
    job = dc.submit(rendered.script, rendered.sbatch_args, user=victim)
    state = dc.wait_job(job, timeout=120)
    out = dropbox / f"ckpt-{job}.out"
    log = out.read_text(errors="replace") if out.exists() else ""
    exit_code = dc.run(["sacct", "-X", "-n", "-P", "-j", job, "--format=ExitCode"]).stdout.strip()
    assert not marker.exists()
    # Nothing of the victim's job went into a directory the attacker controls.
    used = [d for d in planted if (d / ".slurmkit").exists()]
    assert not used, f"the victim's job used the attacker's directory {used}: {log}"
    assert exit_code.startswith(f"{REFUSED}:"), f"{state} {exit_code}: {log}"
    assert "refusing the checkpoint directory" in log and f"{root / victim}" in log
