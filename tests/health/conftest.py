"""Fixtures for the health unit tests (and the hooks', tests/hooks/conftest.py shares them): a
simulated GPU fixture per test, a site config in a temp dir, a check context, and a fake
``scontrol`` that records its arguments (unit tests of the drain/resume control flow only;
Slurm itself is exercised on the devcluster in tests/integration/test_health*.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
HEALTHY = REPO / "etc" / "gpu-fixtures" / "healthy-h100x8.yaml"


def healthy_fixture() -> Dict[str, Any]:
    return yaml.safe_load(HEALTHY.read_text())


@pytest.fixture(autouse=True)
def hook_cache_in_tmp(tmp_path, monkeypatch):
    """The hooks' cache (parsed config and fixtures, slurmkit.core.cache) under the test's own
    directory instead of /run/slurmkit."""
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "hook-cache"))


@pytest.fixture
def gpu_fixture(tmp_path):
    """``gpu_fixture(mutate=None, node="node1")`` writes ``<tmp>/gpu/<node>.yaml`` from the healthy
    fixture after ``mutate(data)``; returns the path."""

    def make(mutate: Optional[Callable[[Dict[str, Any]], None]] = None, node: str = "node1") -> Path:
        data = healthy_fixture()
        if mutate:
            mutate(data)
        path = tmp_path / "gpu" / f"{node}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(yaml.safe_dump(data))
        return path

    return make


def site_dict(
    tmp_path: Path, health: Optional[Dict[str, Any]] = None, slurm: Optional[Dict[str, Any]] = None
):
    h = {"backend": "simulated", "simulated_fixture": str(tmp_path / "gpu" / "{node}.yaml")}
    h.update(health or {})
    data = {
        "paths": {
            "state_dir": str(tmp_path / "state"),
            "shared_dir": str(tmp_path / "shared"),
            "metrics_dir": str(tmp_path / "metrics"),
            "log_dir": str(tmp_path / "log"),
        },
        "health": h,
    }
    if slurm:
        data["slurm"] = slurm
    return data


@pytest.fixture
def site(tmp_path):
    """``site(health={...}, slurm={...})`` -> path of a slurmkit.yaml under tmp_path."""

    def make(health=None, slurm=None) -> Path:
        path = tmp_path / "slurmkit.yaml"
        path.write_text(yaml.safe_dump(site_dict(tmp_path, health, slurm)))
        return path

    return make


@pytest.fixture
def ctx_factory(tmp_path):
    """``ctx_factory(hook="manual", health=None, env=None, node="node1")`` -> an engine Context."""
    from slurmkit.config import load_site_config
    from slurmkit.health.engine import Context

    made = []

    def make(hook: str = "manual", health=None, env=None, node: str = "node1"):
        path = tmp_path / "slurmkit.yaml"
        path.write_text(yaml.safe_dump(site_dict(tmp_path, health)))
        cfg = load_site_config(str(path))
        ctx = Context.from_env(cfg.section("health"), cfg.section("paths"), hook, env=env or {}, node=node)
        made.append(ctx)
        return ctx

    yield make
    for c in made:
        c.close()


@pytest.fixture
def fake_scontrol(tmp_path):
    """A ``bin_dir`` holding a fake ``scontrol``: it appends its argv (one JSON list per line)
    to ``calls.jsonl`` and answers ``show node`` from ``node-<name>.txt`` and ``show job`` from
    ``job-<id>.txt`` when present."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    calls_file = tmp_path / "scontrol-calls.jsonl"
    script = bindir / "scontrol"
    script.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, sys
        with open({str(calls_file)!r}, "a") as fh:
            fh.write(json.dumps(sys.argv[1:]) + "\\n")
        args = sys.argv[1:]
        if "show" in args and "node" in args:
            name = args[-1]
            path = os.path.join({str(bindir)!r}, "node-" + name + ".txt")
            if os.path.exists(path):
                print(open(path).read().strip())
                sys.exit(0)
            sys.stderr.write("Node " + name + " not found\\n")
            sys.exit(1)
        if "show" in args and "job" in args:
            path = os.path.join({str(bindir)!r}, "job-" + args[-1] + ".txt")
            if os.path.exists(path):
                print(open(path).read().strip())
                sys.exit(0)
        sys.exit(0)
        """)
    )
    script.chmod(0o755)

    class Fake:
        bin_dir = str(bindir)
        calls_path = calls_file

        def calls(self):
            import json

            if not calls_file.exists():
                return []
            return [json.loads(line) for line in calls_file.read_text().splitlines() if line.strip()]

        def set_job(self, job_id: str, **fields: str) -> None:
            """``scontrol -o show job <job_id>`` answers ``JobId=<job_id>`` and ``fields``."""
            line = " ".join([f"JobId={job_id}"] + [f"{k}={v}" for k, v in fields.items()])
            (bindir / f"job-{job_id}.txt").write_text(line + "\n")

        def set_node(self, name: str, state: str, reason: str = "") -> None:
            line = f"NodeName={name} Arch=x86_64 CoresPerSocket=8 State={state}"
            if reason:
                line += f" Reason={reason} [root@2026-11-29T10:00:00]"
            (bindir / f"node-{name}.txt").write_text(line + "\n")

    return Fake()


def spawn_as(uid: int, argv, env=None, double_fork: bool = False) -> int:
    """Start ``argv`` as ``uid`` (e.g. nobody), optionally double-forked (a ``sh`` starts it in
    the background and exits, so it is reparented away from us, like a daemonised
    leftover). Returns the pid of the process that keeps running. ``argv`` must be
    runnable by that user (system binaries: the test venv may not be readable)."""
    if not double_fork:
        p = subprocess.Popen(
            argv,
            env=env,
            user=uid,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return p.pid
    import shlex

    cmd = " ".join(shlex.quote(a) for a in argv)
    out = subprocess.run(
        ["/bin/sh", "-c", f"{cmd} </dev/null >/dev/null 2>&1 & echo $!"],
        env=env,
        user=uid,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        start_new_session=True,
    )
    return int(out.stdout.strip())


@pytest.fixture
def reap():
    """Kill (SIGKILL) every pid a test registers, at teardown."""
    pids = []
    yield pids.append
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
