"""The suite's own guards (tests/conftest.py, tests/suite_guards.py), run on throw-away test
files in a pytest subprocess that loads tests/conftest.py as a plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import suite_guards

TESTS = Path(__file__).resolve().parents[1]


def _pytest(tmp_path, body: str, **env_extra) -> subprocess.CompletedProcess:
    (tmp_path / "test_throwaway.py").write_text(body)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CI", "SLURMKIT_UPDATE_GOLDENS", "SLURMKIT_REQUIRE_TRAIN", "SLURMKIT_STRICT_PATHS")
    }
    env.update(env_extra, PYTHONPATH=str(TESTS))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "conftest",
            "--rootdir",
            str(tmp_path),
        ]
        + ["-c", os.devnull, str(tmp_path / "test_throwaway.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
        env=env,
    )


MISSING_DUCKDB = """
import sys
import pytest
sys.modules["duckdb"] = None  # as if it were not installed

def test_engine():
    pytest.importorskip("duckdb")
"""


def test_a_missing_duckdb_skips_locally_and_fails_ci(tmp_path):
    res = _pytest(tmp_path, MISSING_DUCKDB)
    assert res.returncode == 0 and "1 skipped" in res.stdout, res.stdout + res.stderr
    res = _pytest(tmp_path, MISSING_DUCKDB, SLURMKIT_REQUIRE_TRAIN="1")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "a required module is missing" in res.stdout and "duckdb" in res.stdout


def test_updating_goldens_is_refused_in_ci(tmp_path):
    body = "def test_golden():\n    pass\n"
    assert _pytest(tmp_path, body, SLURMKIT_UPDATE_GOLDENS="1").returncode == 0
    res = _pytest(tmp_path, body, SLURMKIT_UPDATE_GOLDENS="1", CI="true")
    assert res.returncode == 4, res.stdout + res.stderr  # pytest's usage error
    assert "SLURMKIT_UPDATE_GOLDENS is set in CI" in res.stderr


def test_a_write_to_a_system_path_fails_the_test_in_strict_mode(tmp_path, monkeypatch):
    """The fixture on a stand-in for /var/log/slurmkit (the real one is not ours to write)."""
    fake = tmp_path / "var-log-slurmkit"
    fake.mkdir()
    body = (
        "import suite_guards\n"
        f"suite_guards._WATCHED = ({str(fake)!r},)\n"
        "def test_writes():\n"
        f"    open({str(fake / 'health.jsonl')!r}, 'a').write('x')\n"
        "def test_reads_only():\n"
        f"    import os; os.listdir({str(fake)!r})\n"
    )
    res = _pytest(tmp_path, body, SLURMKIT_STRICT_PATHS="1")
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"test_writes wrote outside its temporary directories: {fake} changed: health.jsonl" in res.stdout
    assert "2 passed, 1 error" in res.stdout  # the test ran, then failed at teardown
    # not strict (a shared development machine): a warning, the test passes
    (fake / "health.jsonl").unlink()
    res = _pytest(tmp_path, body)
    assert res.returncode == 0 and "wrote outside its temporary directories" in res.stdout


def test_changed_names_what_changed(tmp_path):
    d = tmp_path / "d"
    before = {str(d): suite_guards.fingerprint(str(d))}
    assert before[str(d)] is None
    d.mkdir()
    (d / "a").write_text("1")
    mid = {str(d): suite_guards.fingerprint(str(d))}
    assert suite_guards.changed(before, mid) == {str(d): "created"}
    (d / "a").write_text("12")
    assert suite_guards.changed(mid, {str(d): suite_guards.fingerprint(str(d))}) == {str(d): "changed: a"}
    assert suite_guards.changed(mid, {str(d): None}) == {str(d): "removed"}
    assert suite_guards.changed(mid, mid) == {}


def test_the_watched_paths_include_slurmkits_defaults():
    watched = suite_guards.system_paths()
    for path in (
        "/var/log/slurmkit",
        "/var/lib/slurmkit",
        "/var/lib/prometheus/node-exporter",
        "/etc/slurmkit",
    ):
        assert path in watched


def test_private_system_paths_keeps_a_root_write_out_of_the_system(tmp_path):
    """A hook that falls back to the default paths is run through this wrapper: what it writes
    under /var/log/slurmkit (and the other defaults) lands in the test's scratch directory,
    the real directory is not touched. Unprivileged, the command is returned unchanged."""
    import pytest

    # (the probe makes the directory as a hook does: a new machine may not have it yet)
    probe = "import os, sys; os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True); open(sys.argv[1], 'a').write('x\\n')"
    argv = [sys.executable, "-c", probe]
    if os.geteuid() != 0:
        assert suite_guards.private_system_paths(argv, tmp_path) == argv
        pytest.skip("the overlay needs root (an unprivileged run cannot write the system's paths)")
    target = "/var/log/slurmkit/private-system-paths-probe"
    watched = {p: suite_guards.fingerprint(p) for p in suite_guards.system_paths()}
    res = subprocess.run(
        suite_guards.private_system_paths([*argv, target], tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert not os.path.exists(target)
    assert suite_guards.changed(watched, {p: suite_guards.fingerprint(p) for p in watched}) == {}
    assert suite_guards.private_view(tmp_path, target).read_text() == "x\n"
