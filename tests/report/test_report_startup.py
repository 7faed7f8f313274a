"""`slurmkit report --help` (and its subcommands' help) builds the options (slurmkit/cli/report.py)
without importing the report pipeline (parser, aggregation, rendering, engines) or the health code."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "argv", [["report", "--help"], ["report", "lost", "--help"], ["report", "capacity", "--help"]]
)
def test_report_help_imports_no_pipeline(argv):
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['slurmkit', *{argv!r}]\n"
        "try:\n    runpy.run_module('slurmkit.cli.main', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('LOADED:' + ','.join(sorted(m for m in sys.modules if m.startswith(('slurmkit.report.', 'slurmkit.health.'))\n"
        "                                    or m.split('.')[0] in ('duckdb', 'pyarrow', 'numpy'))))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "Usage:" in res.stdout
    assert res.stdout.strip().splitlines()[-1] == "LOADED:"
