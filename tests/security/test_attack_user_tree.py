"""Attack: the epilog's /dev/shm cleanup runs as root inside a tree the job's user owns.

The user fills ``/dev/shm`` with directories and, while the epilog walks them, swaps
each one for a symlink to a directory of root's. A cleanup that deletes by path name
follows the swapped link and unlinks root's files there. The attacker's racer runs as
a real unprivileged user; the epilog runs as slurmd runs it (``env -i`` plus the job
environment). Each round gives the race a few hundred chances; the old path-based
walk lost root's files in the first round or two.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

from tests.health.conftest import REPO, site_dict

EPILOG = str(REPO / "epilog" / "slurmkit-epilog")
ROUNDS = 6
SUBDIRS = 200

# Run by the attacker with the system python (the test venv may not be readable by him):
# keep every directory flipping between a real directory and a symlink to root's.
RACER = r"""
import os, sys
top, victim, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    os.symlink(victim, f"{top}/l{i}")
while True:
    for i in range(n):
        try:
            os.rename(f"{top}/d{i}", f"{top}/h{i}")   # the directory steps aside
            os.rename(f"{top}/l{i}", f"{top}/d{i}")   # the link takes its name
        except OSError:
            pass
    for i in range(n):
        try:
            os.rename(f"{top}/d{i}", f"{top}/l{i}")
            os.rename(f"{top}/h{i}", f"{top}/d{i}")
        except OSError:
            pass
"""


def _as_user(user: str, argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", user, "--", *argv], capture_output=True, text=True, timeout=60, **kw
    )


def _run_epilog(config: Path, uid: int, user: str) -> subprocess.CompletedProcess:
    # env -i plus what slurmd gives the Epilog (no PATH, no HOME).
    env = {
        "SLURMKIT_CONFIG": str(config),
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_ID": "7001",
        "SLURM_JOB_UID": str(uid),
        "SLURM_JOB_USER": user,
        "SLURM_JOB_EXIT_CODE2": "0:0",
        "SLURM_SCRIPT_CONTEXT": "epilog_slurmd",
    }
    return subprocess.run([sys.executable, EPILOG], env=env, capture_output=True, text=True, timeout=120)


def test_symlink_swap_in_dev_shm_cannot_make_the_epilog_delete_roots_files(unprivileged_users, tmp_path):
    attacker, _victim = unprivileged_users
    uid = pwd.getpwnam(attacker).pw_uid
    healthy = yaml.safe_load((REPO / "etc" / "gpu-fixtures" / "healthy-h100x8.yaml").read_text())
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "node1.yaml").write_text(yaml.safe_dump(healthy))
    config = tmp_path / "slurmkit.yaml"
    config.write_text(yaml.safe_dump(site_dict(tmp_path, {"kill_grace": 0.5})))

    # root's files, outside /dev/shm: they must all survive
    precious = tmp_path / "root-owned"
    precious.mkdir(mode=0o755)
    names = [f"f{i}" for i in range(20)]
    for n in names:
        (precious / n).write_text("root's data\n")

    top = f"/dev/shm/sk-attack-{uuid.uuid4().hex[:8]}"
    lost = []
    try:
        for _ in range(ROUNDS):
            setup = (
                "import os,sys\nt,n=sys.argv[1],int(sys.argv[2])\nos.mkdir(t)\n"
                "[os.mkdir(f'{t}/d{i}') for i in range(n)]\n"
            )
            res = _as_user(attacker, ["/usr/bin/python3", "-c", setup, top, str(SUBDIRS)])
            assert res.returncode == 0, res.stderr
            racer = subprocess.Popen(
                [
                    "runuser",
                    "-u",
                    attacker,
                    "--",
                    "/usr/bin/python3",
                    "-c",
                    RACER,
                    top,
                    str(precious),
                    str(SUBDIRS),
                ],
                start_new_session=True,
            )
            try:
                time.sleep(0.3)
                res = _run_epilog(config, uid, attacker)
                assert res.returncode in (0, 1), res.stderr
            finally:
                os.killpg(racer.pid, signal.SIGKILL)
                racer.wait(timeout=10)
            lost = [n for n in names if not (precious / n).exists()]
            if lost:
                break
            subprocess.run(["rm", "-rf", "--one-file-system", top], timeout=60)
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", top], timeout=60)
    assert not lost, f"the epilog deleted root's files through a swapped symlink: {lost}"
    assert all((precious / n).read_text() == "root's data\n" for n in names)


def test_dev_shm_cleanup_still_removes_the_users_own_tree(unprivileged_users, tmp_path):
    """The fix must not turn the cleanup into a no-op: the user's nested tree is gone
    afterwards, while a symlink the user left there is removed without being followed."""
    attacker, _victim = unprivileged_users
    uid = pwd.getpwnam(attacker).pw_uid
    from slurmkit.hooks import epilog as ep

    precious = tmp_path / "root-owned"
    precious.mkdir()
    (precious / "keep").write_text("x")
    top = f"/dev/shm/sk-own-{uuid.uuid4().hex[:8]}"
    make = (
        "import os,sys\nt,v=sys.argv[1],sys.argv[2]\nos.makedirs(t+'/a/b/c')\n"
        "open(t+'/a/b/c/f','w').write('x')\nopen(t+'/a/g','w').write('x')\nos.symlink(v, t+'/a/link')\n"
        "os.symlink(v, t+'-toplink')\n"
    )
    res = _as_user(attacker, ["/usr/bin/python3", "-c", make, top, str(precious)])
    assert res.returncode == 0, res.stderr
    try:
        out = ep.clean_dev_shm(uid, "7002")
        assert not os.path.lexists(top) and not os.path.lexists(top + "-toplink"), out
        assert os.path.basename(top) in out["removed"]
        assert (precious / "keep").exists()
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", top, top + "-toplink"], timeout=60)
