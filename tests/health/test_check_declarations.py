"""Each health check is declared once: the catalog and the config schema come from the declaration.

The goldens were written from the code *before* the declarations replaced the hand-kept
catalog list and the hand-kept ``health.checks`` schema, so they prove that the published
config keys, their types, defaults, bounds and docs, and the ``health list --json`` output
did not change. Regenerate (only for an intended change) with:
``SLURMKIT_UPDATE_GOLDENS=1 python -m pytest tests/health/test_check_declarations.py -k golden``
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest
from click.testing import CliRunner

from slurmkit.cli.main import cli
from slurmkit.core.schema import Field

GOLDEN = Path(__file__).parent / "golden"
UPDATE = bool(os.environ.get("SLURMKIT_UPDATE_GOLDENS"))
REGENERATE = "SLURMKIT_UPDATE_GOLDENS=1 python -m pytest tests/health/test_check_declarations.py -k golden"


def field_tree(f: Field) -> Dict[str, Any]:
    """Every attribute of a schema field, ``check`` by the name of its function."""
    out: Dict[str, Any] = {
        "type": f.type,
        "default": f.default,
        "doc": f.doc,
        "choices": list(f.choices) if f.choices is not None else None,
        "min": f.min,
        "max": f.max,
        "required": f.required,
        "nullable": f.nullable,
        "check": f.check.__name__ if f.check else None,
        "examples": f.examples,
    }
    if f.items is not None:
        out["items"] = field_tree(f.items)
    if f.fields is not None:
        out["fields"] = {k: field_tree(v) for k, v in f.fields.items()}  # key order is part of it
    return out


def compare_golden(name: str, got_obj: Any) -> None:
    got = json.dumps(got_obj, indent=1) + "\n"
    golden = GOLDEN / name
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(got)
    if not golden.exists():
        pytest.fail(f"no golden file {golden}; create it with: {REGENERATE}")
    want = golden.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(golden), "now"))
        pytest.fail(f"{name} changed:\n{diff}\nIf the change is intended, regenerate: {REGENERATE}")


def test_health_config_schema_matches_golden():
    from slurmkit.health.config import SITE_SCHEMA

    compare_golden("health-schema.json", field_tree(SITE_SCHEMA))


def test_health_list_json_matches_golden(site):
    res = CliRunner().invoke(
        cli, ["health", "list", "--json"], env={"SLURMKIT_CONFIG": str(site())}, catch_exceptions=False
    )
    assert res.exit_code == 0, res.output
    compare_golden("health-list.json", json.loads(res.stdout))


def test_each_check_is_one_declaration_the_catalog_and_schema_come_from():
    from slurmkit.health.catalog import CATALOG
    from slurmkit.health.config import CHECKS_SCHEMA

    assert list(CHECKS_SCHEMA.fields) == list(CATALOG)
    for name, spec in CATALOG.items():
        assert spec.fn.check_spec is spec, name  # the function carries its own declaration
        assert set(CHECKS_SCHEMA.fields[name].fields) == {"enabled", "timeout", *spec.params}, name
        for key, f in spec.params.items():
            assert CHECKS_SCHEMA.fields[name].fields[key] is f, (name, key)


def test_a_check_declared_twice_is_refused():
    from slurmkit.health import declare
    from slurmkit.health.catalog import build_catalog
    from slurmkit.verdict.base import Tier

    @declare.check("twin", Tier.FAST, "first")
    def one(ctx, params): ...

    @declare.check("twin", Tier.FAST, "second")
    def two(ctx, params): ...

    with pytest.raises(ValueError, match="'twin' declared twice"):
        build_catalog([one.check_spec, two.check_spec])


def test_loading_the_declarations_imports_nothing_heavy():
    """The prolog imports every check module for its declaration, heavy.py included: none of them
    may load torch (or numpy, triton), nor statistics (~5 ms of fractions/decimal/random)."""
    code = (
        "import sys\n"
        "import slurmkit.health.config, slurmkit.health.catalog, slurmkit.health.engine\n"
        "assert 'slurmkit.health.checks.heavy' in sys.modules\n"
        "heavy = ('torch', 'numpy', 'triton', 'statistics')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_the_fast_tier_modules_declare_every_fast_check_in_catalog_order():
    """A job start selects from FAST_MODULES only (the heavy module is not imported): they must
    declare exactly the catalog's fast checks, in the catalog's order, and no heavy one."""
    from slurmkit.health import catalog
    from slurmkit.health.declare import declared
    from slurmkit.verdict.base import Tier

    fast_declared = declared(*catalog.FAST_MODULES)
    assert [s.name for s in fast_declared] == [
        s.name for s in catalog.CATALOG.values() if s.tier == Tier.FAST
    ]
    assert all(s.tier == Tier.FAST for s in fast_declared)
    for hook in ("prolog", "epilog", "healthcheck", "manual"):
        assert catalog.select(Tier.FAST, hook) == [
            s for s in catalog.CATALOG.values() if s.tier == Tier.FAST and hook in s.hooks
        ]


def test_a_hook_selects_its_checks_without_the_heavy_module():
    code = (
        "import sys\nfrom slurmkit.health.catalog import select\nfrom slurmkit.verdict.base import Tier\n"
        "n = len(select(Tier.FAST, 'prolog'))\nprint(n, 'slurmkit.health.checks.heavy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    count, heavy_loaded = out.stdout.split()
    assert int(count) >= 10 and heavy_loaded == "False"
