"""The prolog's import path stays lean (issue 28; docs/benchmarks.md, "Prolog fast path").

A prolog is a fresh interpreter per job, so every module it imports is paid on every job
start. Once the config and the GPU fixture are in the hooks' cache, the whole hook (config,
every fast check, the verdict, the JSON-lines record and the textfile metrics) must not pull
in the heavy general-purpose modules: ``dataclasses`` (with ``inspect``, ``ast``, ``dis``,
``tokenize``), ``logging`` (with ``traceback``), ``typing``, PyYAML, prometheus-client, the
process machinery (``subprocess``: the happy path runs no Slurm command), or what only a
cache miss needs (``copy``, ``importlib``).

Nor the modules that ``re`` and ``json`` bring (``enum``, ``functools``, ``collections``):
slurmkit's own names, JSON and vocabularies do without them (``slurmkit.chars``,
``slurmkit.core.jsontext``, ``slurmkit.values.Words``), and the hooks are installed as plain
scripts, not pip's wrappers (which import ``re``).

Only what slurmkit adds is judged: the steady run starts the interpreter without ``site``
(``-S``, slurmkit found through ``PYTHONPATH``), because a dev venv's editable-install finder
imports ``re``, ``pathlib`` and more before any hook code runs, which would hide them here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.health.conftest import HEALTHY, site_dict

REPO = Path(__file__).resolve().parents[2]

#: Modules the cached prolog path must not import (each with the reason it is heavy).
FORBIDDEN = {
    "dataclasses": "inspect, ast, dis, tokenize; exec of each class's methods",
    "inspect": "pulled in by dataclasses",
    "ast": "pulled in by inspect",
    "tokenize": "pulled in by inspect and linecache",
    "logging": "traceback, string, weakref; imported only where a message is emitted",
    "traceback": "only when SLURMKIT_DEBUG asks for a traceback",
    "typing": "annotations are not evaluated (from __future__ import annotations)",
    "yaml": "the config and the fixture come from the hooks' cache",
    "prometheus_client": "slurmkit writes the textfile format itself",
    "subprocess": "no Slurm command on the happy path",
    "threading": "probe threads and the watchdog use _thread (slurmkit.health.deadline)",
    "contextlib": "the Xid cursor's and the store's locks are plain context-manager classes",
    "copy": "(and weakref) only when the config is validated, on a cache miss",
    "importlib": "(and warnings) only when a config section's schema is looked up, on a cache miss",
    "re": "names are checked with str methods (slurmkit.chars); regexes only off the happy path",
    "json": "imports re; JSON through json's own C encoder and scanner (slurmkit.core.jsontext)",
    "enum": "(with functools) the status, action and tier words are slurmkit.values.Words",
    "functools": "imported by enum and re",
    "collections": "imported by functools; the drain reason is a small tuple class",
    "encodings.ascii": "kernel files are read as utf-8, whose codec the interpreter has loaded",
}

PROBE = """
import sys
before = set(sys.modules)
from slurmkit import hooks  # the hook scripts' entry (slurmkit.hooks.run)
from slurmkit.hooks import gate
code = gate.run_hook("prolog")
added = sorted(m for m in set(sys.modules) - before if m.split(".")[0] != "slurmkit")
print(code, " ".join(added))
"""


def _prolog_in_a_fresh_interpreter(tmp_path, bare: bool = False) -> dict:
    """Run the prolog in a new interpreter; ``bare``: without ``site`` (see the module's text)."""
    env = {
        "SLURMKIT_CONFIG": str(tmp_path / "slurmkit.yaml"),
        "SLURMKIT_CACHE_DIR": str(tmp_path / "cache"),
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_UID": "65534",
        "SLURM_JOB_USER": "nobody",
        "SLURM_JOB_GPUS": "0,1",
    }
    argv = [sys.executable, "-c", PROBE]
    if bare:
        argv.insert(1, "-S")
        env["PYTHONPATH"] = str(REPO)
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    code, _, added = res.stdout.strip().splitlines()[-1].partition(" ")
    return {"code": int(code), "added": added.split()}


def test_the_cached_prolog_imports_none_of_the_heavy_modules(tmp_path):
    (tmp_path / "gpu").mkdir()
    shutil.copy(HEALTHY, tmp_path / "gpu" / "node1.yaml")
    (tmp_path / "slurmkit.yaml").write_text(yaml.safe_dump(site_dict(tmp_path)))
    first = _prolog_in_a_fresh_interpreter(tmp_path)  # parses the YAML and fills the cache
    assert first["code"] == 0 and "yaml" in first["added"]
    steady = _prolog_in_a_fresh_interpreter(tmp_path, bare=True)  # every later job start
    assert steady["code"] == 0
    found = {m: why for m, why in FORBIDDEN.items() if m in steady["added"]}
    assert found == {}, f"the prolog's path imports {sorted(found)}; all it added: {steady['added']}"
    records = [json.loads(x) for x in (tmp_path / "log" / "health.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok", "ok"] and len(records[-1]["results"]) >= 10
