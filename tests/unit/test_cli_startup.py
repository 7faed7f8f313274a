"""The CLIs start without importing torch, triton or heavy libraries."""

import subprocess
import sys

import pytest

HEAVY = ("torch", "triton", "numpy", "matplotlib", "jinja2", "prometheus_client", "pynvml")


@pytest.mark.parametrize("module", ["slurmkit.cli.main", "slurmkit.cli.ssubmit"])
def test_help_imports_nothing_heavy(module):
    code = (
        f"import sys, runpy; sys.argv=['x', '--help']\n"
        f"try:\n    runpy.run_module({module!r}, run_name='__main__')\n"
        f"except SystemExit:\n    pass\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        f"print('HEAVY:' + ','.join(bad))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "Usage:" in res.stdout
    assert res.stdout.strip().splitlines()[-1] == "HEAVY:"


def test_unknown_command_is_usage_error():
    res = subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.main", "frobnicate"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2
    assert "No such command 'frobnicate'" in res.stderr
    assert "Traceback" not in res.stderr


def test_config_error_exit_code_and_one_line(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("slurm:\n  timeout: fast\n")
    res = subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.main", "config", "validate", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        == f"slurmkit: error: {cfg}:2: slurm.timeout: expected a number, got a string 'fast'"
    )


def test_yaml_is_imported_only_to_read_yaml(tmp_path):
    """PyYAML costs ~25 ms to import: a command that reads no YAML file does not pay it."""
    cfg = tmp_path / "site.yaml"
    cfg.write_text("report:\n  max_gpus: 64\n")
    code = (
        "import sys\n"
        "import slurmkit.cli.main, slurmkit.cli.ssubmit, slurmkit.config as c\n"
        "before = 'yaml' in sys.modules\n"
        f"cfg = c.load_site_config({str(cfg)!r})\n"
        "print(before, 'yaml' in sys.modules, cfg.section('report')['max_gpus'])"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "True", "64"]
