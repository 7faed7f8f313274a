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


def _loaded_after(code: str) -> list:
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            code + "\nprint('LOADED:' + ','.join(sorted(m for m in sys.modules if 'duckdb' in m)))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-1].removeprefix("LOADED:").split(",")


def test_the_engine_loads_duckdbs_extension_without_its_python_layer():
    """The ``duckdb`` package's Python layer costs a tenth of a year's archive report
    (slurmkit/report/duck.py); the engine and the archive run on the extension alone."""
    loaded = _loaded_after(
        "import sys\n"
        "from slurmkit.report import archive, engine\n"
        "with engine.session() as con:\n"
        "    assert con.execute('SELECT 6 * 7').fetchone() == (42,)\n"
    )
    assert "_duckdb" in loaded
    assert not [m for m in loaded if m == "duckdb" or m.startswith("duckdb.")], loaded


def test_the_duckdb_package_serves_when_the_extension_is_not_importable():
    """A release that renames the extension: ``_duckdb`` does not import, the package does
    (a stand-in here, since the real package imports the extension itself)."""
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, types\n"
            "sys.modules['_duckdb'] = None  # importing it raises ImportError\n"
            "sys.modules['duckdb'] = types.ModuleType('duckdb')\n"
            "from slurmkit.report.duck import duckdb\n"
            "print(duckdb is sys.modules['duckdb'])\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "True"
