"""Attack: a user reboots (or ties up) the node by choosing how the job ends.

``escalation.action: reboot`` used to fire on the job's exit signal alone, and a job
can end itself with any signal: ``kill -BUS $$`` gives signal 7, the default
hardware hint. The attacker's job really dies of SIGBUS here (run as the unprivileged
user); the epilog then runs as slurmd runs it (``env -i`` plus the job environment
slurmd derives from that wait status) with a fake ``scontrol`` that records the reboot
request instead of rebooting this machine.
"""

from __future__ import annotations

import json
import pwd
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import yaml

from tests.health.conftest import REPO, site_dict

EPILOG = str(REPO / "epilog" / "slurmkit-epilog")


def _fake_scontrol(tmp_path: Path) -> Path:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    script = bindir / "scontrol"
    script.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys
        with open({str(tmp_path / "scontrol-calls.jsonl")!r}, "a") as fh:
            fh.write(json.dumps(sys.argv[1:]) + "\\n")
        """)
    )
    script.chmod(0o755)
    return bindir


def _calls(tmp_path: Path):
    f = tmp_path / "scontrol-calls.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines()] if f.exists() else []


def _job_ends_with_sigbus(user: str) -> str:
    """The attacker's batch script: ``kill -BUS $$``. Returns SLURM_JOB_EXIT_CODE2 as slurmd
    derives it from the wait status (``<exit code>:<signal>``)."""
    res = subprocess.run(["runuser", "-u", user, "--", "/bin/bash", "-c", "kill -BUS $$"], timeout=30)
    assert res.returncode < 0 or res.returncode >= 128, res.returncode
    sig = -res.returncode if res.returncode < 0 else res.returncode - 128
    assert sig == 7
    return f"0:{sig}"


def _setup(tmp_path: Path, xid_events=None) -> Path:
    healthy = yaml.safe_load((REPO / "etc" / "gpu-fixtures" / "healthy-h100x8.yaml").read_text())
    if xid_events:
        healthy["xid_events"] = xid_events
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "node1.yaml").write_text(yaml.safe_dump(healthy))
    data = site_dict(tmp_path, {"escalation": {"action": "reboot"}, "clean_dev_shm": False})
    data["slurm"] = {"bin_dir": str(_fake_scontrol(tmp_path))}
    cfg = tmp_path / "slurmkit.yaml"
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def _epilog(cfg: Path, user: str, exit2: str) -> subprocess.CompletedProcess:
    uid = pwd.getpwnam(user).pw_uid
    env = {
        "SLURMKIT_CONFIG": str(cfg),
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_ID": "7101",
        "SLURM_JOB_UID": str(uid),
        "SLURM_JOB_USER": user,
        "SLURM_JOB_GPUS": "0,1",
        "SLURM_JOB_EXIT_CODE2": exit2,
        "SLURM_JOB_EXIT_CODE": "7",
        "SLURM_SCRIPT_CONTEXT": "epilog_slurmd",
    }
    return subprocess.run([sys.executable, EPILOG], env=env, capture_output=True, text=True, timeout=120)


def test_job_killing_itself_with_sigbus_does_not_reboot_the_node(unprivileged_users, tmp_path):
    attacker, _ = unprivileged_users
    exit2 = _job_ends_with_sigbus(attacker)
    res = _epilog(_setup(tmp_path), attacker, exit2)
    assert res.returncode == 0, res.stderr
    calls = _calls(tmp_path)
    assert not [c for c in calls if c[:1] == ["reboot"]], f"the job's own SIGBUS rebooted the node: {calls}"
    assert not [c for c in calls if c[:1] == ["update"]], f"the job's own SIGBUS drained the node: {calls}"


def test_sigbus_with_an_xid_79_still_reboots(unprivileged_users, tmp_path):
    """Evidence the user cannot fake (an Xid in the kernel log) still escalates."""
    attacker, _ = unprivileged_users
    exit2 = _job_ends_with_sigbus(attacker)
    cfg = _setup(tmp_path, [{"xid": 79, "gpu": 1, "timestamp": time.time(), "message": "fell off the bus"}])
    _epilog(cfg, attacker, exit2)
    reboot = [c for c in _calls(tmp_path) if c[:1] == ["reboot"]]
    assert reboot and "Xid 79" in reboot[0][3], _calls(tmp_path)
