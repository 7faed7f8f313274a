"""The accounting archive: sacct job rows kept as Parquet files, one per month.

``slurmkit report ingest`` (cron-friendly) adds a window of sacct output, or a saved
dump, to ``DIR/month=YYYY-MM/data.parquet``; every report view reads it with
``--archive DIR`` and ``slurmkit report sql`` queries it.

Each row is one attempt: sacct's own text in the columns slurmkit asks for
(:data:`~.sacct.FIELDS`), plus typed columns computed once, at ingest, with the
reference's rules (:data:`TYPED`): ``start_s``, ``end_s``, ``submit_s`` (epoch seconds;
``end_s`` is NULL while the job runs, ``submit_s`` when sacct had none) and ``gpus`` (the
AllocTRES GPU count). ISO times in a dump are converted in the ingesting process's time
zone (``TZ``), like the reference parser does. Reports read the typed columns, so a view
over a year is a few aggregates over numbers.

Only job rows of attempts that started are kept (steps carry no allocation of their own;
pending jobs hold no GPU time), and only rows the reference would count: a row with a
malformed or impossible time (before 2000, an End before its Start), an unknown End on a
finished job, garbage AllocTRES or a wrong field count is skipped, counted and reported
with its line number by ``report ingest``.

Idempotent and incremental: an attempt is identified by ``(JobIDRaw, JobID, Start)``;
ingesting a window that overlaps earlier ones replaces those attempts' rows (a job that
was running has its End now) and adds the rest, so nothing is lost or counted twice. A
requeued job's attempts have their own Start and stay distinct. Dumps must be taken
**without** ``sacct -T``: truncated Start times would make the same attempt look new in
the next window. The month of a row is its Start's month in UTC; reports clip to their
window, so the partition only spreads the files.

**Never a partial file.** Files are written under ``DIR/.tmp/`` (private, outside every
glob) and renamed into place, the glob lists only the committed name ``data.parquet``, and
the next ingest removes what a killed one left there (through a descriptor of the checked
directory, never by a path others could redirect): a killed ingest leaves each month as it
was or as the new ingest made it, never half of one or twice.

The layout is Hive-style partitioning, so Spark (``spark.read.parquet(DIR)``), Trino
(the Hive connector) and DuckDB read it as they are; see docs/report.md.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tempfile
from typing import Dict, Iterator, List, Optional, Tuple

from slurmkit.core import files, trust
from slurmkit.errors import UsageError
from slurmkit.report import rules, sacct
from slurmkit.report.duck import duckdb
from slurmkit.report.engine import (
    LINES,
    FileSource,
    _digits,
    _Plan,
    _q,
    _report_bad,
    _state_sql,
    _table,
    _tres_tables,
    epoch_sql,
    hour_key,
    hours_table,
    read_lines,
    session,
    time_why_sql,
)
from slurmkit.report.rules import RULES_VERSION
from slurmkit.slurm.parse import ParseError

SEP = sacct.SACCT_DELIMITER
KEY = ("JobIDRaw", "JobID", "Start")
#: typed columns written next to the text ones (see the module docstring); ``rid`` numbers
#: the rows of the whole archive (the month in its high 32 bits, the row in its low ones)
TYPED = ("start_s", "end_s", "submit_s", "gpus", "jid_i", "state_n")
#: the rows of the jobs with more than one row anywhere in the archive (see _write_multi), and
#: the month files (size, mtime) it was computed from
MULTI, MULTI_STAMP = "_multi.parquet", "_multi.json"  # "_": Spark and Hive skip it
#: ``{"months": {"YYYY-MM": rule version}}``: the rules each month file was written under
#: (:mod:`.rules`; a month missing there predates the stamp: version 1)
RULES_STAMP = "_rules.json"
#: a row's ``why`` while it is classified: Start unknown (not an attempt that ran)
NOT_STARTED = "not_started"
#: how long an ingest waits for another one to finish (cron runs may overlap)
LOCK_TIMEOUT = 300.0
#: how the archive's files are written. Parquet's version 2 encodings store the epoch and id
#: columns as deltas (DELTA_BINARY_PACKED), which a report reads in a third less time than
#: plain values, and the archive is 15 % smaller (docs/benchmarks.md). Spark reads them from
#: 3.3 on; Trino, Arrow, polars and DuckDB read them too (docs/report.md).
PARQUET_OPTIONS = "FORMAT parquet, COMPRESSION zstd, PARQUET_VERSION V2"


#: where files are written before they are renamed into place (no glob of the archive reads it)
TMP_DIR = ".tmp"
#: what a killed ingest can leave behind: in TMP_DIR, and in the month directories of
#: archives written before TMP_DIR existed
LEFTOVER_PREFIXES = (".data-", ".multi-")
#: the one file of a month (the glob lists nothing else)
DATA = "data.parquet"


def parquet_glob(directory: str) -> str:
    return os.path.join(directory, "month=*", DATA)


#: The archive's own directory and its months: readable by others, as sacct's records are
#: by default, written by the ingesting account alone (its temporaries: 0700).
ARCHIVE_MODE = 0o755


def _private_dir(path: str, mode: int = 0o700) -> int:
    """A descriptor of directory ``path``, created ``mode`` if absent; refused (UsageError)
    unless it is a real directory (not a symlink) of this user that nobody else can write."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    try:
        # (no O_CLOEXEC needed: CPython makes every descriptor non-inheritable, PEP 446)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise UsageError(f"--archive: {path}: {exc.strerror} (a symlink or not a directory?)") from None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise UsageError(
            f"--archive: {path} is not this user's private directory: refusing to write or clean it"
        )
    return fd


def _remove_leftovers(path: str, strict: bool = True) -> int:
    """Remove the temporaries a killed ingest left in directory ``path`` (names starting with
    :data:`LEFTOVER_PREFIXES`, regular files), by name relative to a descriptor of the
    checked directory: a symlink swapped in for ``path`` is refused, and a symlink inside it
    is unlinked, never followed. Returns how many were removed. ``strict=False`` (a month
    directory, where only archives of an earlier slurmkit left temporaries, which no glob
    reads now): a directory that is not private is left alone instead of refused."""
    if not strict:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return 0
        if (
            not stat.S_ISDIR(st.st_mode)
            or st.st_uid != os.geteuid()
            or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        ):
            return 0
    fd = _private_dir(path)
    removed = 0
    try:
        for name in os.listdir(fd):
            if not name.startswith(LEFTOVER_PREFIXES):
                continue
            st = os.lstat(name, dir_fd=fd)
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                os.unlink(name, dir_fd=fd)
                removed += 1
    finally:
        os.close(fd)
    return removed


def _clean(directory: str) -> None:
    """At the start of an ingest (under its lock): what killed ones left behind goes."""
    removed = _remove_leftovers(os.path.join(directory, TMP_DIR))
    for name in os.listdir(directory):
        if name.startswith("month="):  # (what is not a private directory is left alone)
            removed += _remove_leftovers(os.path.join(directory, name), strict=False)
    if removed:
        print(f"slurmkit: {directory}: removed {removed} file(s) a killed ingest left", file=sys.stderr)


def _temporary(directory: str, prefix: str) -> str:
    """A new empty file in the archive's private temporary directory."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".parquet", dir=os.path.join(directory, TMP_DIR))
    os.close(fd)
    return tmp


def _months(directory: str) -> List[str]:
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("month="))
    except FileNotFoundError:
        return []
    return [n for n in names if os.path.exists(os.path.join(directory, n, DATA))]


def _files(directory: str) -> str:
    """``read_parquet`` of the archive; files by column name, so archives written before the
    typed columns existed still read (their typed columns are NULL, see :func:`source`)."""
    return f"read_parquet({_q(parquet_glob(directory))}, hive_partitioning = false, union_by_name = true)"


def source(directory: str) -> FileSource:
    """The archive as an engine source: a relation with the columns of the engine's job-row
    table (see ``engine._load_file``); ``{where}`` in it is the engine's window test on
    ``start_s``/``end_s``, which lets DuckDB skip row groups by their statistics.
    Only the columns a report names are read."""
    if not _months(directory):
        raise UsageError(
            f"--archive {directory}: no archive there (run `slurmkit report ingest --archive "
            f"{directory}` first)"
        )
    return FileSource(
        directory,
        list(sacct.FIELDS),
        SEP,
        False,
        1,
        relation=_relation(_files(directory)),
        multi=_multi(directory),
    )


#: the Reason the rules read (a month file keeps every row's; the rules keep it only for the
#: states that can name a launch failure), over the archive's columns
_REASON_KEPT = rules.reason_kept_sql("state_n", '"Reason"')
#: the SQL columns of :data:`.rules.TIE_ORDER`'s fields in the archive's files, joined with
#: ``tres_order t`` (the engine's own map for a dump: ``engine._TIE_COLUMNS``)
_TIE_COLUMNS = {
    "state": "state_n",
    "reason": _REASON_KEPT,
    "job_id": '"JobID"',
    "tres": "t.ord",
    "nodelist": '"NodeList"',
    "user": '"User"',
    "account": '"Account"',
    "partition": '"Partition"',
    "name": None,
    "submit": "coalesce(submit_s, -1)",
}


def _relation(files_sql: str, extra: str = "") -> str:
    """The engine's columns from the archive's (``{where}``: the engine's window test).
    A NULL End or Submit means sacct had none (ingest keeps no other), so the engine's typed
    classification needs no time texts (``engine._Rules.derived``). Rows written before the
    typed columns existed have a NULL Start: the engine hands the report to the reference
    (over :func:`lines`)."""
    return (
        "(SELECT rid, jid_i AS jid, state_n AS state, gpus, start_s AS st, end_s AS en, submit_s AS sub, "
        '"JobID" AS job_id, "AllocTRES" AS tres, "User" AS u, "Account" AS a, "Partition" AS p, '
        '"NodeList" AS nl, "JobName" AS name, '
        f"{_REASON_KEPT} AS reason, 0 AS h "
        f"{extra} FROM {files_sql} {{where}})"
    )


def typed(directory: str) -> bool:
    """Whether any month file has the typed columns (else the engine cannot read the archive)."""
    with session() as con:
        names = {
            c
            for (c,) in con.execute(
                f"SELECT column_name FROM (DESCRIBE SELECT * FROM {_files(directory)})"
            ).fetchall()
        }
    return set(TYPED) <= names


def _fingerprint(directory: str) -> Dict[str, List[int]]:
    out = {}
    for m in _months(directory):
        st = os.stat(os.path.join(directory, m, DATA))
        out[f"{m}/{DATA}"] = [st.st_size, st.st_mtime_ns]
    return out


def _multi(directory: str) -> Optional[str]:
    """``read_parquet`` of the jobs with several rows, when it was computed from the month
    files there now (else None: the engine groups every row instead)."""
    try:
        with open(os.path.join(directory, MULTI_STAMP), encoding="utf-8") as fh:
            stamp = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("files") != _fingerprint(directory):
        return None
    if stamp.get("rules") != RULES_VERSION:  # computed by other rules: recomputed from the rows
        return None
    return _relation(f"read_parquet({_q(os.path.join(directory, MULTI))})", ", tie_rank, pflag, lflag")


def _write_multi(con: duckdb.DuckDBPyConnection, directory: str) -> None:
    """``_multi.parquet``: every row of the jobs with more than one row in the archive (a few
    percent), with what the engine's rules over a job's attempts need from its text columns
    (``tie_rank``, the row's place in the job by :data:`.rules.TIE_ORDER` after
    Start and End; ``pflag``/``lflag``, its Reason naming a launch failure or the prolog / a
    launch), so that a report reads no Reason and groups no job ids over the whole archive;
    ``_multi.json``: the month files (size, mtime) it was computed from."""
    files_sql = _files(directory)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE mr AS
        SELECT * FROM {files_sql} WHERE jid_i IN (SELECT jid_i FROM {files_sql} GROUP BY 1 HAVING count(*) > 1)"""
    )
    distinct = [t for (t,) in con.execute('SELECT DISTINCT "AllocTRES" FROM mr').fetchall()]
    _tres_tables(con, distinct, sys.maxsize, None, name="tres_order")
    tmp = _temporary(directory, ".multi-")
    con.execute(
        f"""COPY (SELECT mr.*,
               row_number() OVER (PARTITION BY jid_i ORDER BY {rules.tie_order_sql(_TIE_COLUMNS)}) AS tie_rank,
               {rules.flags_sql(_REASON_KEPT)}
            FROM mr JOIN tres_order t ON t.tres = mr."AllocTRES") TO {_q(tmp)} ({PARQUET_OPTIONS})"""
    )
    os.replace(tmp, os.path.join(directory, MULTI))
    files.write_json_atomic(
        os.path.join(directory, MULTI_STAMP), {"files": _fingerprint(directory), "rules": RULES_VERSION}
    )


def _rule_versions(directory: str) -> Dict[str, int]:
    try:
        with open(os.path.join(directory, RULES_STAMP), "rb") as fh:
            stamp = json.loads(fh.read())
        months = stamp["months"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return (
        {m: v for m, v in months.items() if isinstance(m, str) and isinstance(v, int)}
        if isinstance(months, dict)
        else {}
    )


def stale_months(directory: str) -> Dict[str, int]:
    """``{month: rule version}`` of the month files written under other rules than these
    (version 1: before the stamp existed)."""
    versions = _rule_versions(directory)
    out = {}
    for m in _months(directory):
        v = versions.get(m[len("month=") :], 1)
        if v != RULES_VERSION:
            out[m[len("month=") :]] = v
    return out


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def lines(directory: str) -> Iterator[str]:
    """The archive's rows as sacct text, times as the epochs stored at ingest (for the
    reference path; line numbers are row numbers)."""
    epochs = typed(directory)
    with session() as con:
        cols = []
        for c in sacct.FIELDS:
            t = {"Start": "start_s", "End": "end_s", "Submit": "submit_s"}.get(c) if epochs else None
            cols.append(f"coalesce(CAST({t} AS VARCHAR), {_ident(c)})" if t else _ident(c))
        cur = con.execute(f'SELECT {", ".join(cols)} FROM {_files(directory)} ORDER BY "JobIDRaw", "Start"')
        while True:
            batch = cur.fetchmany(10000)
            if not batch:
                return
            for row in batch:
                yield SEP.join("" if v is None else v for v in row)


def ingest(directory: str, src: FileSource) -> Dict[str, object]:
    """Add a saved dump's attempts to the archive; returns what changed per month and what
    was skipped (``skipped``: rows not kept; ``bad_rows``: a :class:`.sacct.ParseStats` of the
    rows the reference would report, with their line numbers and reasons)."""
    plan = _Plan(src)
    idx = {c.strip().lower(): i for i, c in enumerate(src.columns)}
    select = []
    for c in sacct.FIELDS:
        # (JobName's field ``f<i>`` holds its surplus fields: the reader folds them back)
        if c == "JobIDRaw":
            select.append(f"{plan.raw} AS {_ident(c)}")
        elif c.lower() in idx:
            select.append(f"f{idx[c.lower()]} AS {_ident(c)}")
        else:
            select.append(f"'' AS {_ident(c)}")
    # the levels above are the path the user gave (as ``mkdir -p``); the archive itself must
    # be this account's and writable by nobody else, or another user could plant a month in it
    os.makedirs(os.path.dirname(os.path.abspath(directory)), exist_ok=True)
    os.close(_private_dir(directory, ARCHIVE_MODE))
    try:
        lock = trust.lock(
            os.path.join(directory, ".ingest.lock"), LOCK_TIMEOUT, owners=frozenset({os.geteuid()})
        )
    except TimeoutError:
        raise UsageError(f"--archive {directory}: another `report ingest` is still running") from None
    except trust.UntrustedFile as exc:
        raise UsageError(f"--archive {directory}: {exc}") from None
    try:
        _clean(directory)
        return _ingest(directory, src, plan, select)
    finally:
        os.close(lock)


def _ingest(directory: str, src: FileSource, plan: _Plan, select: List[str]) -> Dict[str, object]:
    months: Dict[str, int] = {}
    with session() as con:
        try:
            read_lines(con, plan)
            con.execute(f"""CREATE TEMP TABLE new AS
                SELECT ln, lh, {", ".join(select)}, coalesce({plan.count_ok}, FALSE) AS n_ok,
                    coalesce({plan.count_ok}, FALSE) AND NOT {plan.surplus} AND {plan.id_ok} AS ok
                FROM {plan.reader()} WHERE NOT coalesce({plan.step}, FALSE) AND NOT (f1 IS NULL AND trim(f0) = '')""")
        except duckdb.InvalidInputException as exc:
            # the line reader refuses a line with a NUL byte (sacct never writes one); the
            # archive is untouched, and the user is told which line to clean
            where = re.search(r"CSV Error on Line: (\d+)", str(exc))
            line = f"line {where.group(1)}" if where else "a line"
            raise UsageError(
                f"{src.path}: {line} holds a NUL byte, which sacct never writes; nothing was ingested "
                "(remove it, e.g. tr -d '\\000')"
            ) from None
        con.execute(f"DROP TABLE {LINES}")
        _typed_columns(con, "new")
        # the reference's rules: what it would skip as not started, malformed or impossible, and
        # its reason (rules.row_class_sql's order: not started, then bad times, then impossible
        # ones; then a garbage AllocTRES)
        state = _state_sql('"State"')
        unknown_end = rules.unknown_time_sql('"End"')
        times = ("start_s", "end_s", "submit_s")
        con.execute("""ALTER TABLE new ADD COLUMN why VARCHAR""")
        con.execute(f"""UPDATE new SET why = CASE
            WHEN NOT ok THEN {plan.shape_why("n_ok")}
            WHEN {rules.unknown_time_sql('"Start"')} THEN '{NOT_STARTED}'
            WHEN start_s IS NULL OR (end_s IS NULL AND NOT ({unknown_end} AND {rules.running_sql(state)}))
                 OR (submit_s IS NULL AND NOT {rules.unknown_time_sql('"Submit"')})
                 OR {rules.impossible_time_cond_sql(*times)}
                THEN {time_why_sql(*times, '"End"', '"Submit"', state)}
            WHEN gpus IS NULL THEN {_q(sacct.GARBAGE_TRES)}
            END""")
        skipped = dict(
            con.execute(
                f"SELECT why = '{NOT_STARTED}', count(*) FROM new WHERE why IS NOT NULL GROUP BY 1"
            ).fetchall()
        )
        bad = _bad_rows(con, plan.src.first_row)
        con.execute("DELETE FROM new WHERE why IS NOT NULL")
        month = "strftime(make_timestamp(start_s * 1000000), '%Y-%m')"
        # one row per attempt: a repeated key keeps the row with a known End
        keys = ", ".join(_ident(k) for k in KEY)
        cols = ", ".join(_ident(c) for c in (*sacct.FIELDS, *TYPED))
        con.execute(f"""CREATE TEMP TABLE fresh AS SELECT {cols}, month FROM (
            SELECT *, {month} AS month, row_number() OVER (PARTITION BY {keys}
                ORDER BY (end_s IS NULL), end_s DESC, "State") AS rn FROM new)
            WHERE rn = 1""")
        rows = con.execute("SELECT count(*) FROM fresh").fetchone()[0]
        for (m,) in con.execute("SELECT DISTINCT month FROM fresh ORDER BY month").fetchall():
            part = os.path.join(directory, f"month={m}")
            os.close(_private_dir(part, ARCHIVE_MODE))  # (never a planted link or another's directory)
            target = os.path.join(part, DATA)
            old = ""
            if os.path.exists(target):
                # the month's rows, typed again from their text (the source of truth; a month
                # written before the typed columns existed gets them here)
                text = ", ".join(_ident(c) for c in sacct.FIELDS)
                con.execute(
                    f"CREATE OR REPLACE TEMP TABLE old AS SELECT {text} FROM read_parquet({_q(target)})"
                )
                _typed_columns(con, "old")
                old = (
                    f"UNION ALL SELECT {cols} FROM old o WHERE NOT EXISTS ("
                    f"SELECT 1 FROM fresh f WHERE f.month = {_q(m)} AND "
                    + " AND ".join(f"f.{_ident(k)} = o.{_ident(k)}" for k in KEY)
                    + ")"
                )
            tmp = _temporary(directory, ".data-")
            # sorted by Start, so each row group covers a span of time and a report's window
            # skips the others by their statistics
            month_no = int(m[:4]) * 12 + int(m[5:]) - 1
            order = 'start_s, "JobIDRaw", "JobID"'
            con.execute(
                f"COPY (SELECT *, ({month_no}::BIGINT << 32) + row_number() OVER (ORDER BY {order}) AS rid "
                f"FROM (SELECT {cols} FROM fresh WHERE month = {_q(m)} {old}) ORDER BY {order}) "
                f"TO {_q(tmp)} ({PARQUET_OPTIONS})"
            )
            n = con.execute(f"SELECT count(*) FROM read_parquet({_q(tmp)})").fetchone()[0]
            os.replace(tmp, target)
            months[m] = n
        if months:
            versions = _rule_versions(directory)
            versions.update(dict.fromkeys(months, RULES_VERSION))
            files.write_json_atomic(os.path.join(directory, RULES_STAMP), {"months": versions})
            _write_multi(con, directory)
    return {
        "rows": rows,
        "skipped": sum(skipped.values()),
        "not_started": skipped.get(True, 0),
        "malformed": skipped.get(False, 0),
        "months": months,
        "bad_rows": bad,
    }


def _bad_rows(con: duckdb.DuckDBPyConnection, first_row: int) -> sacct.ParseStats:
    """The rows of table ``new`` the reference would report (line numbers and reasons, as its
    warning gives them): those not kept for a reason (``why``) and the exact copies of an
    earlier kept row (which the archive keeps once, as one attempt), counted in SQL by the
    engine's own :func:`~.engine._report_bad`."""
    con.execute(
        f"""CREATE TEMP TABLE badrows AS SELECT ln, why FROM new WHERE why IS NOT NULL AND why <> '{NOT_STARTED}'
        UNION ALL SELECT ln, {_q(sacct.DUPLICATE_ROW)} FROM (
            SELECT ln, row_number() OVER (PARTITION BY "JobIDRaw", lh ORDER BY ln) AS k FROM new
            WHERE why IS NULL) WHERE k > 1"""
    )
    stats = sacct.ParseStats()
    _report_bad(con, first_row, stats)
    con.execute("DROP TABLE badrows")
    return stats


def _typed_columns(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Add :data:`TYPED` to ``table`` (sacct text columns): epochs from epoch text or, for
    ISO text, from the hour looked up by Python (:func:`sacct.parse_time`: local time and DST
    as the reference decides them); the GPU count by :func:`sacct.parse_gpu_tres`."""
    times = (("Start", "start_s"), ("End", "end_s"), ("Submit", "submit_s"))
    hours_table(con, [f"SELECT {hour_key(_ident(t))} FROM {table}" for t, _ in times])
    gpus: List[Tuple[str, int]] = []
    for (t,) in con.execute(f'SELECT DISTINCT "AllocTRES" FROM {table}').fetchall():
        try:
            gpus.append((t, sacct.parse_gpu_tres((t or "").strip())[0]))
        except ParseError:
            continue
    _table(con, "tres", ("tres", "gpus"), ("VARCHAR", "BIGINT"), gpus)
    epochs = ", ".join(
        f"{epoch_sql(f'n.{_ident(t)}', f'h{i}.epoch')} AS {name}" for i, (t, name) in enumerate(times)
    )
    joins = " ".join(
        f"LEFT JOIN hours h{i} ON h{i}.key = {hour_key(f'n.{_ident(t)}')}" for i, (t, _) in enumerate(times)
    )
    raw = 'n."JobIDRaw"'
    con.execute(
        f"CREATE TEMP TABLE typed AS SELECT n.*, {epochs}, t.gpus, "
        f"CASE WHEN {_digits(raw)} THEN CAST({raw} AS BIGINT) END AS jid_i, "
        f"""{_state_sql('n."State"')} AS state_n """
        f'FROM {table} n {joins} LEFT JOIN tres t ON t.tres = n."AllocTRES"'
    )
    con.execute(f"DROP TABLE {table}")
    con.execute(f"ALTER TABLE typed RENAME TO {table}")


#: ``report sql``'s lockdown, after the archive's view is made: the query reads the archive's
#: directory and nothing else of the file system, writes no file, installs and loads no
#: extension, and cannot undo any of it (DuckDB, "Securing DuckDB",
#: https://duckdb.org/docs/stable/operations_manual/securing_duckdb/overview)
SQL_LOCKDOWN = (
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET allow_community_extensions = false",
    "SET enable_external_access = false",
    "SET lock_configuration = true",
)


#: the statements ``report sql`` runs: queries (``SELECT``, ``FROM ...``, ``DESCRIBE``, ``SHOW``,
#: ``SUMMARIZE``, ``WITH``) and ``EXPLAIN``. External access off still lets DuckDB write into the
#: archive's directory (the one it may read): ``COPY``, ``EXPORT``, ``CREATE``, ``ATTACH`` and the rest are refused.
READ_ONLY_STATEMENTS = frozenset({"SELECT", "EXPLAIN"})


def _one_read_only_statement(con: duckdb.DuckDBPyConnection, query: str) -> None:
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise UsageError(f"sql: {str(exc).splitlines()[0]}") from None
    kinds = [s.type.name for s in statements]
    if len(kinds) != 1 or kinds[0] not in READ_ONLY_STATEMENTS:
        raise UsageError(
            f"sql: runs one read-only query (SELECT or EXPLAIN), not {'; '.join(kinds) or 'nothing'}"
        )


def sql(directory: Optional[str], query: str):
    """``(column names, rows)`` of an ad-hoc query; the archive is the view ``jobs``
    (plus a ``month`` column from the partition). The query runs under
    :data:`SQL_LOCKDOWN`: external access off (only the archive's directory can be read),
    the configuration locked, and only one statement of :data:`READ_ONLY_STATEMENTS`."""
    with session() as con:
        if directory:
            if not _months(directory):
                raise UsageError(f"--archive {directory}: no archive there")
            con.execute(
                f"CREATE VIEW jobs AS SELECT * FROM read_parquet({_q(parquet_glob(directory))}, "
                f"hive_partitioning = true, union_by_name = true)"
            )
            con.execute(f"SET allowed_directories = [{_q(os.path.join(os.path.abspath(directory), ''))}]")
        for setting in SQL_LOCKDOWN:
            con.execute(setting)
        _one_read_only_statement(con, query)
        try:
            cur = con.execute(query)
        except duckdb.Error as exc:
            raise UsageError(f"sql: {str(exc).splitlines()[0]}") from None
        names = [d[0] for d in cur.description] if cur.description else []
        return names, cur.fetchall()
