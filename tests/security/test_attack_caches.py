"""Attack: run code as another user through their job's compiler caches (issue 25).

Each job's Triton and TorchInductor caches used to live in ``${TMPDIR:-/tmp}/slurmkit-<job
id>``, created with ``makedirs(exist_ok=True)``. Job ids are public and sequential: the
attacker pre-created that directory for the next ids with a cache of his own, and the
victim's job loaded it (Inductor imports the compiled Python modules it finds in its
cache); pre-created 0755 instead, it made the victim's job fail.

Now node-launch (``jobside.node_cache_dir``) uses that name only when the job creates it
or it is already the user's own 0700 directory, and otherwise a fresh ``mkdtemp`` one:
the victim's job neither runs the attacker's cache nor fails.

Stand-ins, because the unprivileged users cannot read the test venv (torch lives there):
``torch.distributed.run`` is a tiny module that runs the training command once with the
job's environment (what node-launch prepared is what matters here), and the "trainer"
imports every ``.py`` file under its two cache directories, as Inductor's code cache does.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from attack_helpers import as_user

from tests.health.conftest import REPO

PLANT = r"""
import os, sys
marker, mode = sys.argv[1], int(sys.argv[2], 8)
for d in sys.argv[3:]:
    for sub in ("triton", "inductor"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        with open(os.path.join(d, sub, "evil.py"), "w") as fh:
            fh.write(f"open({marker!r}, 'a').write('ran as %d\\n' % __import__('os').getuid())\n")
    for root, dirs, files in os.walk(d):
        os.chmod(root, mode)
"""

STAND_IN_TORCHRUN = """\
import subprocess, sys
args = [a for a in sys.argv[1:] if not a.startswith("--")]
sys.exit(subprocess.call([sys.executable, *args]))
"""

LOADER = """\
import glob, json, os, runpy
for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
    for f in sorted(glob.glob(os.path.join(os.environ[var], "**", "*.py"), recursive=True)):
        runpy.run_path(f)  # what a cache holds runs as the job's user
st = os.lstat(os.environ["SLURMKIT_NODE_TMP"])
print("CACHES " + json.dumps({
    "node_tmp": os.environ["SLURMKIT_NODE_TMP"],
    "triton": os.environ["TRITON_CACHE_DIR"],
    "inductor": os.environ["TORCHINDUCTOR_CACHE_DIR"],
    "uid": st.st_uid, "mode": st.st_mode & 0o7777, "me": os.getuid(),
}), flush=True)
"""


def _stock(d: Path) -> Path:
    """Put the stand-in ``torch.distributed.run`` and the loader into the 1777 directory ``d``."""
    stub = d / "stub" / "torch" / "distributed"
    stub.mkdir(parents=True)
    for init in (d / "stub" / "torch" / "__init__.py", stub / "__init__.py"):
        init.write_text("")
    (stub / "run.py").write_text(STAND_IN_TORCHRUN)
    (d / "loader.py").write_text(LOADER)
    for p in [d / "stub", *(d / "stub").rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.chmod(d / "loader.py", 0o644)
    return d


@pytest.fixture
def dropbox():
    d = Path(tempfile.mkdtemp(prefix="sk-sec-cache-"))
    os.chmod(d, 0o1777)
    yield _stock(d)
    shutil.rmtree(d, ignore_errors=True)


def _render(dc, dropbox: Path, name: str, tmpdir: Path):
    from slurmkit.config import load_site_config
    from slurmkit.submit.render import render
    from slurmkit.submit.spec import validate_spec

    cfg = load_site_config(str(dc.config_path))
    spec = validate_spec(
        {
            "name": name,
            "nodes": 1,
            "device": "cpu",
            "time": "5",
            "fabric": "none",
            "python": "/usr/bin/python3",
            "env": {"PYTHONPATH": f"{dropbox / 'stub'}:{REPO}", "TMPDIR": str(tmpdir)},
            "script": str(dropbox / "loader.py"),
            "preflight": {"allreduce": False},
            "requeue": {"enabled": False},
            "output": str(dropbox / "cache-%j.out"),
            "workdir": str(dropbox),
        }
    )
    site = dict(cfg.section("submit"))
    # a checkpoint root the victim can use (the devcluster's has directories for its own users only)
    checkpoints = dropbox / "checkpoints"
    checkpoints.mkdir(exist_ok=True)
    os.chmod(checkpoints, 0o1777)
    site["checkpoint_root"] = str(checkpoints)
    return render(spec, site=site, paths=cfg.section("paths"))


@pytest.mark.devcluster
def test_victims_job_neither_runs_the_planted_cache_nor_fails(devcluster, unprivileged_users, shared_dropbox):
    """On the devcluster every job has a private /tmp (``job_container/tmpfs``), which closes
    the attack on /tmp by itself. A site's shared node-local scratch as ``TMPDIR`` (a 1777
    tree every job on the node sees) does not: that is where the attacker plants here."""
    dc = devcluster
    dropbox = _stock(shared_dropbox)  # the jobs see it: the stand-in torch and the loader
    scratch = dropbox / "node-scratch"
    scratch.mkdir()
    os.chmod(scratch, 0o1777)
    attacker, victim = unprivileged_users
    dc.associate(attacker, victim)
    marker = dropbox / "pwned"
    for mode in ("0777", "0755"):  # a cache the victim would load; one that made the job fail
        probe = int(dc.submit("#!/bin/sh\ntrue\n", ["--output=/dev/null"], user=attacker))
        dirs = [f"{scratch}/slurmkit-{n}" for n in range(probe + 1, probe + 4)]
        res = as_user(attacker, PLANT, str(marker), mode, *dirs)
        assert res.returncode == 0, res.stderr
        rendered = _render(dc, dropbox, f"cache-{mode}", scratch)
        job = dc.submit(rendered.script, rendered.sbatch_args, user=victim)
        assert f"{scratch}/slurmkit-{job}" in dirs, "the attacker guessed the job id (the premise)"
        state = dc.wait_job(job, timeout=120)
        out = dropbox / f"cache-{job}.out"
        log = out.read_text(errors="replace") if out.exists() else ""
        assert not marker.exists(), f"the victim's job ran the attacker's cache: {marker.read_text()}"
        assert state == "COMPLETED", f"{mode}: {state}: {log}"
        line = next((x for x in log.splitlines() if x.startswith("CACHES ")), None)
        assert line, log
        used = json.loads(line[len("CACHES ") :])
        assert used["node_tmp"].startswith(f"{scratch}/slurmkit-{job}-"), used
        assert used["uid"] == used["me"] and used["mode"] == 0o700, used
        assert f"not using {scratch}/slurmkit-{job}" in log


def test_planted_cache_stays_unused_by_the_real_jobside_as_the_victim(unprivileged_users, dropbox):
    """The same attack without Slurm: the real node-launch, run as the victim, after the
    attacker planted the directory (0777 and 0755) for the job id it will have."""
    attacker, victim = unprivileged_users
    marker = dropbox / "pwned-local"
    for n, mode in ((990001, "0777"), (990002, "0755")):
        planted = f"/tmp/slurmkit-{n}"
        try:
            assert as_user(attacker, PLANT, str(marker), mode, planted).returncode == 0
            res = as_user(
                victim,
                "import os, subprocess, sys\n"
                "env = dict(os.environ, SLURM_JOB_ID=sys.argv[1], PYTHONPATH=sys.argv[2])\n"
                "env.pop('TMPDIR', None)\n"
                "# what the batch script exported before issue 25; node-launch must not trust it\n"
                "tmp = env['SLURMKIT_NODE_TMP'] = '/tmp/slurmkit-' + sys.argv[1]\n"
                "env.update(TRITON_CACHE_DIR=tmp + '/triton', TORCHINDUCTOR_CACHE_DIR=tmp + '/inductor')\n"
                "sys.exit(subprocess.call([sys.executable, '-m', 'slurmkit.submit.jobside', 'node-launch',\n"
                "    '--phase', 'train', '--', sys.executable, sys.argv[3]], env=env))\n",
                str(n),
                str(REPO),
                str(dropbox / "loader.py"),
                timeout=60,
            )
            assert res.returncode == 0, res.stderr
            assert not marker.exists()
            used = json.loads(next(x for x in res.stdout.splitlines() if x.startswith("CACHES "))[7:])
            assert used["node_tmp"].startswith(f"{planted}-") and used["mode"] == 0o700
            assert stat.S_IMODE(os.lstat(planted).st_mode) == int(mode, 8)  # left as it was
        finally:
            for d in [planted, *glob.glob(f"{planted}-*")]:
                shutil.rmtree(d, ignore_errors=True)
