"""The accounting archive: sacct job rows kept as Parquet files, one per month.

``slurmkit report ingest`` (cron-friendly) adds a window of sacct output, or a saved
dump, to ``DIR/month=YYYY-MM/data.parquet``; every report view reads it with
``--archive DIR`` and ``slurmkit report sql`` queries it. Rows are sacct's own text
(the columns slurmkit asks for, :data:`~.sacct.FIELDS`, as strings), job rows only
(steps carry no allocation of their own), attempts that started (pending jobs hold no
GPU time).

Idempotent and incremental: an attempt is identified by ``(JobIDRaw, JobID, Start)``;
ingesting a window that overlaps earlier ones replaces those attempts' rows (a job
that was running has its End now) and adds the rest, so nothing is lost or counted
twice. A requeued job's attempts have their own Start and stay distinct. Dumps must
be taken **without** ``sacct -T``: truncated Start times would make the same attempt
look new in the next window. The month of a row is its Start's month in UTC; reports
clip to their window, so the partition only spreads the files.

The layout is Hive-style partitioning, so Spark (``spark.read.parquet(DIR)``), Trino
(the Hive connector) and DuckDB read it as they are; see docs/report.md.
"""

from __future__ import annotations

import os
import tempfile
from typing import Dict, Iterator, List, Optional

import duckdb

from slurmkit.errors import UsageError
from slurmkit.report import sacct
from slurmkit.report.engine import EXTRA, FileSource, _digits, _Plan, _q
from slurmkit.report.window import resolve_window

SEP = sacct.SACCT_DELIMITER
KEY = ("JobIDRaw", "JobID", "Start")


def parquet_glob(directory: str) -> str:
    return os.path.join(directory, "month=*", "*.parquet")


def _months(directory: str) -> List[str]:
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("month="))
    except FileNotFoundError:
        return []
    return [n for n in names if os.path.exists(os.path.join(directory, n, "data.parquet"))]


def source(directory: str) -> FileSource:
    """The archive as an engine source (the same columns as slurmkit's sacct call)."""
    if not _months(directory):
        raise UsageError(
            f"--archive {directory}: no archive there (run `slurmkit report ingest --archive "
            f"{directory}` first)"
        )
    cols = ", ".join(f'"{c}" AS f{i}' for i, c in enumerate(sacct.FIELDS))
    extra = ", ".join(f"CAST(NULL AS VARCHAR) AS x{i}" for i in range(EXTRA))
    files = _q(parquet_glob(directory))
    rel = f"(SELECT {cols}, {extra} FROM read_parquet({files}, hive_partitioning = false))"
    return FileSource(directory, list(sacct.FIELDS), SEP, False, 1, relation=rel, clean=True)


def lines(directory: str) -> Iterator[str]:
    """The archive's rows as sacct text (for the reference path; line numbers are row numbers)."""
    con = duckdb.connect()
    try:
        cols = ", ".join(f'"{c}"' for c in sacct.FIELDS)
        files = _q(parquet_glob(directory))
        cur = con.execute(f'SELECT {cols} FROM read_parquet({files}) ORDER BY "JobIDRaw"')
        while True:
            batch = cur.fetchmany(10000)
            if not batch:
                return
            for row in batch:
                yield SEP.join("" if v is None else v for v in row)
    finally:
        con.close()


def ingest(directory: str, src: FileSource) -> Dict[str, object]:
    """Add a saved dump's job rows to the archive; returns what changed per month."""
    window = resolve_window(default_unbounded=True)
    plan = _Plan(src, window, window.end, sacct.Filters())
    idx = {c.strip().lower(): i for i, c in enumerate(src.columns)}
    select = []
    for c in sacct.FIELDS:
        if c == "JobName" and "jobname" in idx:
            select.append(f'{plan.name} AS "{c}"')
        elif c == "JobIDRaw":
            select.append(f'{plan.raw} AS "{c}"')
        elif c.lower() in idx:
            select.append(f'f{idx[c.lower()]} AS "{c}"')
        else:
            select.append(f"'' AS \"{c}\"")
    start = plan.start
    month = (
        f"CASE WHEN {_digits(start)} "
        f"THEN strftime(make_timestamp(CAST({start} AS BIGINT) * 1000000), '%Y-%m') "
        f"WHEN length({start}) = 19 AND substr({start}, 5, 1) = '-' THEN left({start}, 7) END"
    )
    os.makedirs(directory, exist_ok=True)
    con = duckdb.connect(config={"threads": 2, "memory_limit": "768MB"})
    out: Dict[str, object] = {"rows": 0, "skipped": 0, "months": {}}
    try:
        con.execute("SET enable_progress_bar = false")
        con.execute(f"""CREATE TEMP TABLE new AS
            SELECT {", ".join(select)}, {month} AS month, {plan.count_ok} AS ok
            FROM {plan.reader()} WHERE NOT {plan.step}""")
        out["skipped"] = con.execute("SELECT count(*) FROM new WHERE NOT ok OR month IS NULL").fetchone()[0]
        con.execute("DELETE FROM new WHERE NOT ok OR month IS NULL")
        # one row per attempt: a repeated key keeps the row with a known End
        keys = ", ".join(f'"{k}"' for k in KEY)
        con.execute(f"""CREATE TEMP TABLE fresh AS SELECT * EXCLUDE (ok) FROM (
            SELECT *, row_number() OVER (PARTITION BY {keys}
                ORDER BY ("End" IN ('Unknown', 'None', '')), "End" DESC, "State") AS rn FROM new)
            WHERE rn = 1""")
        con.execute("ALTER TABLE fresh DROP COLUMN rn")
        out["rows"] = con.execute("SELECT count(*) FROM fresh").fetchone()[0]
        cols = ", ".join(f'"{c}"' for c in sacct.FIELDS)
        for (m,) in con.execute("SELECT DISTINCT month FROM fresh ORDER BY month").fetchall():
            part = os.path.join(directory, f"month={m}")
            os.makedirs(part, exist_ok=True)
            target = os.path.join(part, "data.parquet")
            old = ""
            if os.path.exists(target):
                old = (
                    f"UNION ALL SELECT {cols} FROM read_parquet({_q(target)}) o WHERE NOT EXISTS ("
                    f"SELECT 1 FROM fresh f WHERE f.month = {_q(m)} AND "
                    + " AND ".join(f'f."{k}" = o."{k}"' for k in KEY)
                    + ")"
                )
            fd, tmp = tempfile.mkstemp(prefix=".data-", suffix=".parquet", dir=part)
            os.close(fd)
            con.execute(
                f'COPY (SELECT {cols} FROM fresh WHERE month = {_q(m)} {old} ORDER BY "JobIDRaw", '
                f'"Start") TO {_q(tmp)} (FORMAT parquet, COMPRESSION zstd)'
            )
            n = con.execute(f"SELECT count(*) FROM read_parquet({_q(tmp)})").fetchone()[0]
            os.replace(tmp, target)
            out["months"][m] = n
    finally:
        con.close()
    return out


def sql(directory: Optional[str], query: str):
    """``(column names, rows)`` of an ad-hoc query; the archive is the view ``jobs``
    (plus a ``month`` column from the partition)."""
    con = duckdb.connect(config={"threads": 2, "memory_limit": "768MB"})
    try:
        con.execute("SET enable_progress_bar = false")
        if directory:
            if not _months(directory):
                raise UsageError(f"--archive {directory}: no archive there")
            con.execute(
                f"CREATE VIEW jobs AS SELECT * FROM read_parquet({_q(parquet_glob(directory))}, "
                f"hive_partitioning = true)"
            )
        try:
            cur = con.execute(query)
        except duckdb.Error as exc:
            raise UsageError(f"sql: {str(exc).splitlines()[0]}") from None
        names = [d[0] for d in cur.description] if cur.description else []
        return names, cur.fetchall()
    finally:
        con.close()
