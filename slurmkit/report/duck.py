"""DuckDB for the report engine and the archive, imported as its C++ extension.

The ``duckdb`` package is the extension ``_duckdb`` (connections, SQL, results, errors)
re-exported, plus a Python layer that slurmkit does not use: the relational and expression
builders, and a version read through ``importlib.metadata``. Importing the package costs
several times what the extension alone does, a noticeable share of a year's report from
the archive (figures in docs/benchmarks.md).
Everything slurmkit calls (``connect``, ``DuckDBPyConnection``, ``Error``, ``__version__``)
is the same object in both, so where the extension is not importable under that name (a
future release may rename it) the package serves.
"""

from __future__ import annotations

try:
    import _duckdb as duckdb

    # the names slurmkit uses; a build without one of them falls back to the package
    duckdb.connect, duckdb.DuckDBPyConnection, duckdb.Error, duckdb.__version__  # noqa: B018
except (ImportError, AttributeError):  # pragma: no cover - the extension keeps this name in 2.x
    import duckdb  # type: ignore[no-redef]

__all__ = ["duckdb"]
