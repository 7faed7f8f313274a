"""The package's layers only point down (docs/structure.md).

Every ``import`` of a slurmkit module, at module level or inside a function, is an edge
from the importing unit (a subpackage, or a top-level module) to the imported one. An
edge must go to a strictly lower layer or stay inside its own unit; a function-level
import is not a way around that.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[2] / "slurmkit"

#: Top to bottom. Units on one line may not import each other.
LAYERS: List[Set[str]] = [
    {"cli"},  # command-line code only
    {"api"},  # the public Python API (ssubmit's CLI is a front end over it)
    {"sweep", "submit", "report", "devcluster"},  # orchestration
    {"hooks"},  # the node-side programs at job boundaries: gate, epilog, efficiency, leaks, node ops
    {"health"},  # the check framework, the checks and their GPU backends
    {"verdict", "config"},  # status/action/result, the store, the record; the site config
    {"metrics"},  # Prometheus textfiles, written through core's atomic writer and trust rule
    {"slurm", "core"},  # the Slurm CLI (runner, parse, client); YAML, schema, files, trust
    {"hw", "errors", "resources"},
    {"values", "chars"},  # small value classes without dataclasses; name characters without re (the hooks)
]
RANK: Dict[str, int] = {unit: i for i, units in enumerate(LAYERS) for unit in units}

#: Downward edges that are still not allowed: the report reads accounting data (the
#: AdminComment codec is in ``slurm/``), never the node side's programs or checks.
FORBIDDEN: Dict[str, Set[str]] = {"report": {"hooks", "health"}}


def _unit(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package).parts
    return rel[0][:-3] if len(rel) == 1 else rel[0]


def _module_parts(path: Path, package: Path) -> List[str]:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported_units(path: Path, package: Path) -> List[Tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    here = _module_parts(path, package)
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(tree):
        targets: List[List[str]] = []
        if isinstance(node, ast.Import):
            targets = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = base + (node.module.split(".") if node.module else [])
            else:
                module = node.module.split(".") if node.module else []
            targets = [module + [alias.name] for alias in node.names] if len(module) == 1 else [module]
        for target in targets:
            if len(target) >= 2 and target[0] == "slurmkit" and target[1] != "__init__":
                found.append((node.lineno, target[1]))
    return found


def _edges(package: Path = PACKAGE) -> List[Tuple[str, int, str, str]]:
    edges = []
    for path in sorted(package.rglob("*.py")):
        if path.parent == package and path.name == "__init__.py":
            continue
        src = _unit(path, package)
        for lineno, dst in _imported_units(path, package):
            if dst != src and dst != "__version__":
                edges.append((str(path.relative_to(package.parent)), lineno, src, dst))
    return edges


def test_every_unit_has_a_layer():
    units = {_unit(p) for p in PACKAGE.rglob("*.py") if not (p.parent == PACKAGE and p.name == "__init__.py")}
    assert units - set(RANK) == set(), "add the new unit to LAYERS (and docs/structure.md)"


def test_imports_only_point_down():
    upward = [
        f"{path}:{lineno}: {src} imports {dst}"
        for path, lineno, src, dst in _edges()
        if dst in RANK and src in RANK and RANK[dst] <= RANK[src]
    ]
    assert upward == []


def test_no_forbidden_edge():
    found = [
        f"{path}:{lineno}: {src} imports {dst}"
        for path, lineno, src, dst in _edges()
        if dst in FORBIDDEN.get(src, ())
    ]
    assert found == []


def test_the_walker_sees_hidden_imports(tmp_path):
    """Function-level, relative and ``from slurmkit import x`` imports are all edges, so an
    upward import hidden inside a function is caught."""
    pkg = tmp_path / "slurmkit"
    (pkg / "core").mkdir(parents=True)
    (pkg / "cli").mkdir()
    for init in (pkg / "__init__.py", pkg / "core" / "__init__.py", pkg / "cli" / "__init__.py"):
        init.write_text("")
    (pkg / "core" / "a.py").write_text("def f():\n    from ..cli import main\n")
    (pkg / "core" / "b.py").write_text("def g():\n    from slurmkit import health\n")
    (pkg / "core" / "c.py").write_text("import slurmkit.report.engine\n")
    found = {(src, dst) for _, _, src, dst in _edges(pkg)}
    assert found == {("core", "cli"), ("core", "health"), ("core", "report")}


def _slurm_env_reads(path: Path) -> List[int]:
    """Lines that read a ``SLURM*`` variable by name: ``x.get("SLURM_...")`` or ``x["SLURM_..."]``."""

    def named(node) -> bool:
        return (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("SLURM")
        )

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if node.args and named(node.args[0]) and not node.args[0].value.startswith("SLURMKIT_"):
                found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and named(node.slice):
            if not node.slice.value.startswith("SLURMKIT_"):
                found.append(node.lineno)
    return found


def test_every_slurm_variable_is_read_by_the_one_job_environment_reader():
    reads = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE.parent).as_posix() != "slurmkit/slurm/jobenv.py"
        for line in _slurm_env_reads(path)
    ]
    assert reads == [], "read Slurm's environment through slurmkit.slurm.jobenv.JobEnv"
