"""Fixtures for the report tests: UTC time, an isolated site config, a CLI runner."""

from __future__ import annotations

import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Fixtures hold ISO local times; read them as UTC. The ISO hour cache depends
    on the zone, so it is cleared around each test."""
    from slurmkit.report import sacct

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    sacct.clear_time_caches()
    yield
    monkeypatch.undo()
    time.tzset()
    sacct.clear_time_caches()


@pytest.fixture
def site_config(tmp_path, monkeypatch):
    """A site config whose log_dir is private, so no real health log is joined."""
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    cfg = tmp_path / "slurmkit.yaml"
    cfg.write_text(f"paths:\n  log_dir: {log_dir}\n  state_dir: {tmp_path}\nreport:\n  currency: USD\n")
    monkeypatch.setenv("SLURMKIT_CONFIG", str(cfg))
    return cfg


@pytest.fixture
def cli(site_config):
    """``cli(*args)`` runs ``slurmkit <args>`` in-process and returns the click Result."""
    from slurmkit.cli.common import run_main
    from slurmkit.cli.main import cli as main_cli

    class Entry(click.Command):
        """Runs the real entry point (run_main), so exit codes and one-line errors
        are those a user sees."""

        def main(self, args=None, prog_name=None, **kwargs):
            run_main(main_cli, "slurmkit", list(args or ()))

    runner = CliRunner()
    entry = Entry("slurmkit")

    def invoke(*args: str):
        return runner.invoke(entry, list(args), catch_exceptions=False)

    return invoke


@pytest.fixture
def fixture_path():
    return lambda name: str(FIXTURES / name)
