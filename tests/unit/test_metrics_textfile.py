"""slurmkit's own textfile writer: what it writes parses with prometheus-client's parser and
``promtool check metrics``, and the prolog never imports prometheus-client."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurmkit.metrics import Sample, format_value, render, write_textfile

SAMPLES = [
    Sample("slurmkit_x", "doc with \\ and\nnewline", {"node": 'we"ird\nna\\me', "hook": "prolog"}, 2),
    Sample("slurmkit_x", "doc with \\ and\nnewline", {"node": "b", "hook": "epilog"}, 3.5),
    Sample("slurmkit_y", "no labels", {}, 1),
    Sample("slurmkit_big", "big and small", {"k": "a"}, 1.5e300),
    Sample("slurmkit_big", "big and small", {"k": "b"}, -2.5e-7),
    Sample("slurmkit_big", "big and small", {"k": "c"}, float("inf")),
    Sample("slurmkit_big", "big and small", {"k": "d"}, float("-inf")),
    Sample("slurmkit_big", "big and small", {"k": "e"}, float("nan")),
]


def test_prometheus_client_reads_back_every_sample():
    fams = {f.name: f for f in text_string_to_metric_families(render(SAMPLES))}
    assert (
        fams["slurmkit_x"].documentation == "doc with \\ and\nnewline" and fams["slurmkit_x"].type == "gauge"
    )
    got = {(s.labels.get("node"), s.labels.get("hook")): s.value for s in fams["slurmkit_x"].samples}
    assert got == {('we"ird\nna\\me', "prolog"): 2.0, ("b", "epilog"): 3.5}
    assert [s.value for s in fams["slurmkit_y"].samples] == [1.0]
    big = {s.labels["k"]: s.value for s in fams["slurmkit_big"].samples}
    assert big["a"] == 1.5e300 and big["b"] == -2.5e-7 and big["c"] == math.inf and big["d"] == -math.inf
    assert math.isnan(big["e"])


def test_the_exact_text():
    text = render([Sample("a_b", "h", {"z": "1", "a": "2"}, 0), Sample("c", "d", {}, 1)])
    assert text == '# HELP a_b h\n# TYPE a_b gauge\na_b{a="2",z="1"} 0.0\n# HELP c d\n# TYPE c gauge\nc 1.0\n'
    assert render([]) == ""
    assert [format_value(v) for v in (1, -0.5, math.inf, -math.inf, math.nan)] == [
        "1.0",
        "-0.5",
        "+Inf",
        "-Inf",
        "NaN",
    ]


@pytest.mark.skipif(
    not shutil.which("promtool"), reason="promtool not installed (apt-get install prometheus)"
)
def test_promtool_accepts_it():
    res = subprocess.run(
        ["promtool", "check", "metrics"], input=render(SAMPLES), capture_output=True, text=True, timeout=60
    )
    # promtool's lint (exit 3) only names conventions (e.g. counters' _total); any parse error exits 1
    assert res.returncode in (0, 3) and "error" not in (res.stdout + res.stderr).lower(), (
        res.stdout + res.stderr
    )


@pytest.mark.parametrize(
    "bad,match",
    [
        ([Sample("1x", "d")], "invalid metric name"),
        ([Sample("x", "d", {"a-b": "1"})], "invalid label name"),
        ([Sample("x", "d", {"__name__": "1"})], "invalid label name"),
        ([Sample("x", "d", {"a": "1"}), Sample("x", "d", {"b": "1"})], "label names"),
    ],
)
def test_bad_samples_raise_before_anything_is_written(tmp_path, bad, match):
    path = tmp_path / "m.prom"
    path.write_text("old\n")
    with pytest.raises(ValueError, match=match):
        write_textfile(str(path), bad)
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["m.prom"]


def test_written_atomically_with_its_mode(tmp_path):
    path = tmp_path / "d" / "m.prom"
    write_textfile(str(path), SAMPLES[:2])
    write_textfile(str(path), SAMPLES[2:3], mode=0o600)
    assert path.read_text() == render(SAMPLES[2:3]) and os.listdir(path.parent) == ["m.prom"]
    assert (path.stat().st_mode & 0o777) == 0o600


def test_the_prolog_does_not_import_prometheus_client(tmp_path):
    """The whole hook path (config, every fast check, the record and its metrics) without it."""
    import yaml

    from tests.health.conftest import HEALTHY, site_dict

    (tmp_path / "gpu").mkdir()
    shutil.copy(HEALTHY, tmp_path / "gpu" / "node1.yaml")
    config = tmp_path / "slurmkit.yaml"
    config.write_text(yaml.safe_dump(site_dict(tmp_path)))
    code = (
        "import sys\n"
        "from slurmkit.hooks import gate\n"
        "code = gate.run_hook('prolog')\n"
        "print('CODE', code, 'prometheus_client' in sys.modules)\n"
    )
    env = {
        "SLURMKIT_CONFIG": str(config),
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_ID": "1",
        "PATH": "/usr/bin:/bin",
    }
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.stdout.strip().splitlines()[-1] == "CODE 0 False", res.stdout + res.stderr
    assert (tmp_path / "metrics" / "slurmkit_health_prolog_node1.prom").exists()
