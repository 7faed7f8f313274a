"""The DuckDB engine of ``slurmkit report`` (the ``slurmkit[report]`` extra).

The pure-Python parser and aggregator (:mod:`.sacct`, :mod:`.aggregate`) are the
reference: they define every rule. This engine gives the same answer faster and in
bounded memory by letting DuckDB do the per-row work, in two scans of the file:

1. **Look-ups** (one ``GROUP BY GROUPING SETS`` scan): the distinct AllocTRES strings,
   NodeLists and ISO hours, the first Start, and the jobs with more than one job row
   (requeued attempts, duplicates). Python turns the few distinct values into tables
   with the reference's own functions (``parse_gpu_tres``, ``expand_hostlist``,
   ``mktime`` through ``parse_time``, the period splitter), so TRES parsing, hostlists,
   local time and DST are decided in exactly one place.
2. **Aggregation**: every *plain* row (one job row for its job, all fields well
   formed, times clean, in the window) is summed in SQL, grouped by the report
   dimensions, final state, AllocTRES string, NodeList and period. Everything else
   (jobs with several rows, so the prolog-requeue rule and distinct-job counting see
   all attempts of a job together; rows with a wrong field count, an odd time, an
   unknown end, garbage or impossible data) comes back as the row's text and goes
   through the reference parser and aggregator. Because rows are split by job, the
   two sets of accumulators simply add up.

Malformed or impossible rows must be reported with line numbers, which DuckDB's
reader does not keep; when the second set holds any, :class:`NeedsReference` asks
the caller to run the reference path, which reports them exactly.

Sums of whole GPU-seconds are exact in both engines; splits by node or GPU type are
floating point and may differ from the reference in the last bits (the tests allow
1e-6 GPU-hours).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import duckdb

from slurmkit.errors import UsageError
from slurmkit.report import sacct
from slurmkit.report.aggregate import FIELD_DIMS, TIME_DIMS, PeriodSplitter, _Acc, accumulate, pieces_of
from slurmkit.report.cost import PriceTable
from slurmkit.report.lost import LOST_STATES, DrainEvent, find_lost, find_suspect
from slurmkit.report.sacct import Attempt, Filters, ParseStats
from slurmkit.report.window import Window

#: Columns read beyond the expected ones: a trailing delimiter and surplus fields
#: (a ``|`` in a job name). A row that fills the last one may have lost fields.
EXTRA = 3
_NULL = "\u0000slurmkit-no-null\u0001"  # DuckDB's nullstr: no field ever equals it
_UNKNOWN_SQL = "('Unknown', 'None', '', 'N/A')"


class NeedsReference(Exception):
    """The input has rows only the reference path can report (line numbers) or read."""


@dataclass
class FileSource:
    """A saved dump as the reference reader sees it: columns, delimiter, trailing
    delimiter, and the line number of the first data row."""

    path: str
    columns: List[str]
    sep: str
    trailing: bool
    first_row: int
    #: SQL of a relation with columns f0..fN (the archive); None: read ``path`` as CSV
    relation: Optional[str] = None
    #: every row is a job row with the right field count (the archive): look-ups per column
    clean: bool = False


def probe_file(
    path: str, columns: Optional[Sequence[str]] = None, delimiter: Optional[str] = None
) -> Optional[FileSource]:
    """Read the head of ``path`` with the reference reader's rules; ``None`` when empty."""
    try:
        fh = open(path, "r", encoding="utf-8", errors="replace", newline=None)
    except OSError as exc:
        raise UsageError(f"--sacct-file {path}: {exc.strerror}") from None
    with fh:
        header = ""
        first_line = 1
        for header in fh:
            if header.strip() and not header.startswith("#"):
                break
            first_line += 1
        if not header.strip() or header.startswith("#"):
            return None
        if columns is not None:
            first = header.rstrip("\r\n")
            sep = delimiter or (sacct.SACCT_DELIMITER if sacct.SACCT_DELIMITER in first else "|")
            trailing = first.endswith(sep) and len(first.split(sep)) == len(columns) + 1
            return FileSource(path, list(columns), sep, trailing, first_line)
        cols, sep, trailing = sacct.read_header(header, delimiter)
        return FileSource(path, cols, sep, trailing, first_line + 1)


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _digits(expr: str) -> str:
    """SQL: the text is 1 to 12 ASCII digits without a leading zero (a cast and back, cheaper than a
    regular expression; anything else, such as ``012``, is left to the reference)."""
    return f"(length({expr}) <= 12 AND CAST(TRY_CAST({expr} AS UBIGINT) AS VARCHAR) = {expr})"


def _in_list(values: Iterable[str]) -> str:
    return "(" + ", ".join(_q(v) for v in sorted(values)) + ")"


class _Plan:
    """Column positions and the SQL expressions shared by both scans."""

    def __init__(self, src: FileSource, window: Window, hi: int, filters: Filters):
        self.src = src
        cols = src.columns
        idx = {c.strip().lower(): i for i, c in enumerate(cols)}
        lacking = [c for c in sacct.REQUIRED_COLUMNS if c.lower() not in idx]
        if lacking:
            raise UsageError(f"sacct data lacks column(s) {', '.join(lacking)}; {sacct.recommended_hint()}")
        self.nf = nf = len(cols)
        self.names = [f"f{i}" for i in range(nf)] + [f"x{i}" for i in range(EXTRA)]

        def col(name: str) -> Optional[str]:
            i = idx.get(name)
            return None if i is None else f"f{i}"

        self.jobid = col("jobid")
        self.raw = col("jobidraw") or self.jobid
        self.state_raw, self.tres = col("state"), col("alloctres")
        self.start, self.end, self.submit = col("start"), col("end"), col("submit")
        blank = "''"
        self.user = col("user") or blank
        self.account = col("account") or blank
        self.partition = col("partition") or blank
        self.nodelist = col("nodelist") or blank
        self.name = col("jobname") or blank
        i_name = idx.get("jobname")
        self.jobid_first = idx["jobid"] == 0
        # A surplus field folds into JobName; the JobIDRaw read by DuckDB is wrong when JobName comes first.
        i_jid = idx.get("jobidraw", idx["jobid"])
        self.shifts_jid = i_name is not None and i_name < nf - 1 and i_name < i_jid
        last = f"f{nf - 1}"
        if src.trailing:
            self.count_ok = "(x0 = '' AND x1 IS NULL)"
            self.surplus = "(x1 IS NOT NULL)"
        elif i_name == nf - 1:  # JobName last (slurmkit's own order): surplus fields are part of the name
            self.count_ok = f"({last} IS NOT NULL)"
            self.surplus = "FALSE"
            self.name = f"concat_ws({_q(src.sep)}, {last}, {', '.join(f'x{i}' for i in range(EXTRA))})"
        else:
            self.count_ok = f"({last} IS NOT NULL AND x0 IS NULL)"
            self.surplus = "(x0 IS NOT NULL)"
        self.overflow = f"(x{EXTRA - 1} IS NOT NULL)"
        self.step = (
            "(contains(f0, '.') AND f1 IS NOT NULL)"
            if self.jobid_first
            else f"({self.count_ok} AND contains({self.jobid}, '.'))"
        )
        self.lo, self.hi = window.start, hi
        conds = []
        for values, expr in (
            (filters.users, self.user),
            (filters.accounts, self.account),
            (filters.partitions, self.partition),
            (filters.names, self.name),
        ):
            if values is not None:
                conds.append(f"{expr} NOT IN {_in_list(values)}" if values else "TRUE")
        if filters.states is not None:
            conds.append(f"state NOT IN {_in_list(filters.states)}" if filters.states else "TRUE")
        self.filtered = " OR ".join(conds) if conds else "FALSE"

    def reader(self) -> str:
        if self.src.relation is not None:
            return self.src.relation
        spec = "{" + ", ".join(f"'{n}': 'VARCHAR'" for n in self.names) + "}"
        return (
            f"read_csv({_q(self.src.path)}, columns={spec}, delim={_q(self.src.sep)}, quote='', "
            f"escape='', header=false, skip={self.src.first_row - 1}, auto_detect=false, "
            f"strict_mode=false, "
            f"null_padding=true, nullstr={_q(_NULL)}, parallel=true)"
        )

    @staticmethod
    def hour_key(expr: str) -> str:
        """The ISO hour (``YYYY-MM-DDTHH``) of a time text that looks ISO, else NULL."""
        return f"(CASE WHEN length({expr}) = 19 AND substr({expr}, 5, 1) = '-' THEN left({expr}, 13) END)"

    @staticmethod
    def epoch(expr: str, hour_epoch: str) -> str:
        """Epoch seconds of a clean time text, NULL otherwise (the reference decides those);
        ``hour_epoch`` is the looked-up epoch of its ISO hour (local time, by Python)."""
        return (
            f"(CASE WHEN {_digits(expr)} THEN CAST({expr} AS BIGINT) "
            f"WHEN {hour_epoch} IS NOT NULL AND regexp_full_match({expr}, "
            f"'[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}[T ][0-9]{{2}}:[0-5][0-9]:[0-9]{{2}}') "
            f"AND CAST(substr({expr}, 18, 2) AS INTEGER) <= 60 "
            f"THEN {hour_epoch} + 60 * CAST(substr({expr}, 15, 2) AS BIGINT) "
            f"+ CAST(substr({expr}, 18, 2) AS BIGINT) END)"
        )


def _lookups(con: duckdb.DuckDBPyConnection, plan: _Plan, need_nodes: bool) -> Dict[str, Any]:
    """Scan 1, one pass with grouping sets: distinct AllocTRES, NodeLists and ISO hours;
    jobs with more than one job row; the first epoch Start; rows with surplus fields."""
    job = f"(NOT {plan.step} AND {plan.count_ok})"
    iso = "CASE WHEN length({t}) = 19 AND substr({t}, 5, 1) = '-' THEN left({t}, 13) END"
    times = [plan.start, plan.end] + ([plan.submit] if plan.submit else [])
    hour_cols = ", ".join(f"{iso.format(t=t)} AS h{i}" for i, t in enumerate(times))
    hour_sets = ", ".join(f"(h{i})" for i in range(len(times)))
    sql = f"""
    SELECT GROUPING(jid, tres, nl, {", ".join(f"h{i}" for i in range(len(times)))}) AS gid,
           coalesce(jid, tres, nl, {", ".join(f"h{i}" for i in range(len(times)))}) AS k,
           count(*) FILTER (WHERE over) AS n_over, count(*) FILTER (WHERE surplus) AS n_surplus,
           min(st_epoch) AS min_epoch
    FROM (SELECT CASE WHEN NOT {plan.step} THEN {plan.raw} END AS jid,
                 CASE WHEN {job} THEN {plan.tres} END AS tres,
                 CASE WHEN {job} AND {need_nodes} THEN {plan.nodelist} END AS nl,
                 {hour_cols}, {plan.overflow} AS over, {plan.surplus} AND NOT {plan.step} AS surplus,
                 CASE WHEN {_digits(plan.start)} THEN CAST({plan.start} AS BIGINT)
                 END AS st_epoch
          FROM {plan.reader()})
    GROUP BY GROUPING SETS ((jid), (tres), (nl), {hour_sets}, ())
    HAVING GROUPING(jid) = 1 OR count(*) > 1
    """
    nsets = 3 + len(times)
    full = (1 << nsets) - 1
    out: Dict[str, Any] = {
        "multi": [],
        "tres": [],
        "nodes": [],
        "hours": [],
        "overflow": 0,
        "surplus": 0,
        "min_epoch": None,
    }
    target = {
        full ^ (1 << (nsets - 1)): "multi",
        full ^ (1 << (nsets - 2)): "tres",
        full ^ (1 << (nsets - 3)): "nodes",
    }
    for gid, k, n_over, n_surplus, min_epoch in con.execute(sql).fetchall():
        if gid == full:
            out["overflow"], out["surplus"], out["min_epoch"] = n_over, n_surplus, min_epoch
        elif k is not None:
            out[target.get(gid, "hours")].append(k)
    return out


def _lookups_by_column(con: duckdb.DuckDBPyConnection, plan: _Plan, need_nodes: bool) -> Dict[str, Any]:
    """Scan 1 for a relation of clean job rows (the archive: ingest kept only job rows with
    the right field count): the same look-ups as :func:`_lookups`, one small query per
    column, so Parquet reads only the columns each needs (1.8 s instead of 2.7 s over a
    10-month archive of 2.9M attempts, docs/benchmarks.md)."""
    rel = plan.reader()
    out: Dict[str, Any] = {"overflow": 0, "surplus": 0}
    out["tres"] = [
        t for (t,) in con.execute(f"SELECT DISTINCT {plan.tres} FROM {rel}").fetchall() if t is not None
    ]
    out["nodes"] = []
    if need_nodes:
        out["nodes"] = [
            n
            for (n,) in con.execute(f"SELECT DISTINCT {plan.nodelist} FROM {rel}").fetchall()
            if n is not None
        ]
    times = [plan.start, plan.end] + ([plan.submit] if plan.submit else [])
    hours = " UNION ".join(
        f"SELECT DISTINCT left({t}, 13) AS k FROM {rel} WHERE length({t}) = 19 AND substr({t}, 5, 1) = '-'"
        for t in times
    )
    out["hours"] = [k for (k,) in con.execute(hours).fetchall()]
    out["multi"] = [
        j
        for (j,) in con.execute(
            f"SELECT {plan.raw} FROM {rel} WHERE {plan.raw} IS NOT NULL GROUP BY 1 HAVING count(*) > 1"
        ).fetchall()
    ]
    out["min_epoch"] = con.execute(
        f"SELECT min(CAST({plan.start} AS BIGINT)) FROM {rel} WHERE {_digits(plan.start)}"
    ).fetchone()[0]
    return out


def _table(
    con: duckdb.DuckDBPyConnection,
    name: str,
    cols: Sequence[str],
    types: Sequence[str],
    rows: Sequence[Tuple],
) -> None:
    """A temp table from Python rows, in one statement (``executemany`` is per row)."""
    lists = [[r[i] for r in rows] for i in range(len(cols))]
    select = ", ".join(f"unnest(CAST(? AS {t}[])) AS {c}" for c, t in zip(cols, types))
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT {select}", lists)


def _hour_table(keys: Iterable[str]) -> List[Tuple[str, int]]:
    rows = []
    for k in keys:
        if k is None:
            continue
        try:
            rows.append((k, sacct.parse_time(k + ":00:00")))
        except ValueError:
            continue
    return rows


def _periods(unit: str, start: int, end: int) -> List[Tuple[str, int, int]]:
    sp = PeriodSplitter(unit)
    out = []
    t = start
    while True:
        label, lo, hi = sp.period(t)
        out.append((label, lo, hi))
        if hi >= end:
            return out
        t = hi


def run(
    src: FileSource,
    *,
    window: Window,
    now: Optional[float],
    filters: Optional[Filters],
    by: Sequence[str],
    prices: Optional[PriceTable],
    max_gpus: int,
    prolog_requeue_seconds: float,
    drains: Optional[Sequence[DrainEvent]] = None,
    lost_window_hours: float = 6.0,
    threads: Optional[int] = None,
) -> Tuple[Dict[Tuple, _Acc], _Acc, ParseStats]:
    """The report's accumulators and parse statistics for a saved dump."""
    filters = filters or Filters()
    now_i = int(now if now is not None else time.time())
    hi = min(window.end, now_i)
    plan = _Plan(src, window, hi, filters)
    priced = bool(prices and prices.enabled)
    time_dim = next((d for d in by if d in TIME_DIMS), None)
    need_nodes = "node" in by
    con = duckdb.connect(
        config={"threads": threads or 2, "memory_limit": "768MB", "preserve_insertion_order": False}
    )
    con.execute("SET enable_progress_bar = false")
    try:
        look = (_lookups_by_column if src.clean else _lookups)(con, plan, need_nodes)
        if look["overflow"] or (look["surplus"] and plan.shifts_jid):
            raise NeedsReference("rows with surplus fields before JobIDRaw")
        hours = _hour_table(set(look["hours"]))
        _table(con, "hours", ("key", "epoch"), ("VARCHAR", "BIGINT"), hours)
        tres_map: Dict[str, Tuple[int, Tuple[Tuple[str, int], ...]]] = {}
        for t in look["tres"]:
            try:
                g = sacct.parse_gpu_tres(t.strip())
            except sacct.ParseError:
                continue
            if max(g[0], sum(n for _, n in g[1])) <= max_gpus:
                tres_map[t] = g
        _table(con, "tres", ("tres", "gpus"), ("VARCHAR", "BIGINT"), [(k, v[0]) for k, v in tres_map.items()])
        _table(con, "multi", ("jid",), ("VARCHAR",), [(j,) for j in look["multi"]])
        periods: List[Tuple[str, int, int]] = []
        if time_dim:
            firsts = [v for v in [look["min_epoch"]] + [e for _, e in hours] if v is not None]
            p_lo = max(window.start, min(firsts)) if firsts else window.start
            periods = _periods(time_dim, max(p_lo, sacct.EARLIEST_TIME), max(hi, p_lo + 1))
            _table(
                con,
                "periods",
                ("label", "lo", "hi"),
                ("VARCHAR", "BIGINT", "BIGINT"),
                periods + [(None, -10, 0)],
            )
        drain_windows = []
        if drains:
            span = lost_window_hours * 3600.0
            drain_windows = [(ev.timestamp - span, ev.timestamp) for ev in drains]
            _table(con, "drains", ("lo", "hi"), ("DOUBLE", "DOUBLE"), drain_windows)
        groups, total, stats, py_lines, sus_lines = _aggregate(
            con, plan, by, time_dim, tres_map, priced, prices, bool(drain_windows), bool(hours)
        )
    finally:
        con.close()
    _merge_reference(
        groups,
        total,
        stats,
        py_lines,
        sus_lines,
        src,
        window,
        now,
        filters,
        by,
        prices,
        max_gpus,
        prolog_requeue_seconds,
        drains,
        lost_window_hours,
    )
    return groups, total, stats


def _aggregate(
    con,
    plan: _Plan,
    by: Sequence[str],
    time_dim: Optional[str],
    tres_map,
    priced: bool,
    prices: Optional[PriceTable],
    with_drains: bool,
    iso: bool,
):
    """Scan 2: sum the plain rows; return the other rows' text."""
    lo, hi = plan.lo, plan.hi
    running = _in_list(sacct.RUNNING_STATES)
    state = (
        f"(CASE WHEN contains({plan.state_raw}, ' ') THEN split_part({plan.state_raw}, ' ', 1) "
        f"ELSE {plan.state_raw} END)"
    )
    h1, h2, h3 = ("h1.epoch", "h2.epoch", "h3.epoch") if iso else ("NULL", "NULL", "NULL")
    sub = plan.epoch(plan.submit, h3) if plan.submit else "NULL"
    sub_ok = f"({plan.submit} IN {_UNKNOWN_SQL} OR sub IS NOT NULL)" if plan.submit else "TRUE"
    line = "concat_ws(" + _q(plan.src.sep) + ", " + ", ".join(plan.names) + ")"
    hour_joins = ""
    if iso:
        hour_joins = (
            f"LEFT JOIN hours h1 ON h1.key = {plan.hour_key(plan.start)} "
            f"LEFT JOIN hours h2 ON h2.key = {plan.hour_key(plan.end)} "
        )
        if plan.submit:
            hour_joins += f"LEFT JOIN hours h3 ON h3.key = {plan.hour_key(plan.submit)}"
    field_keys = [d for d in by if d in FIELD_DIMS]
    key_expr = {"user": plan.user, "account": plan.account, "partition": plan.partition, "state": "state"}
    keys_sql = ", ".join(f"CASE WHEN cls = 'agg' THEN {key_expr[d]} END AS k_{d}" for d in field_keys)
    node_sql = (
        f"CASE WHEN cls = 'agg' THEN {plan.nodelist} END AS k_nodes" if "node" in by else "NULL AS k_nodes"
    )
    drain_sql = (
        "(cls = 'agg' AND EXISTS (SELECT 1 FROM drains d WHERE st <= d.hi AND e >= d.lo))"
        if with_drains
        else "FALSE"
    )
    sql = f"""
    WITH rs AS (SELECT *, {plan.step} AS is_step FROM {plan.reader()}),
    r0 AS (
        SELECT rs.*, {state} AS state, {plan.raw} AS jid,
               CASE WHEN NOT is_step THEN {plan.epoch(plan.start, h1)} END AS st,
               CASE WHEN NOT is_step THEN {plan.epoch(plan.end, h2)} END AS en,
               CASE WHEN NOT is_step THEN {sub} END AS sub,
               {plan.end} IN {_UNKNOWN_SQL} AS end_unknown
        FROM rs {hour_joins}),
    r1 AS (
        SELECT *, CASE
            WHEN is_step THEN 'step'
            WHEN NOT {plan.count_ok} THEN 'py'
            WHEN r0.jid IN (SELECT jid FROM multi) THEN 'py'
            WHEN {plan.filtered} THEN 'filtered'
            WHEN {plan.start} IN {_UNKNOWN_SQL} THEN 'notstarted'
            WHEN st IS NULL OR NOT {sub_ok} THEN 'py'
            WHEN end_unknown AND state IN {running} THEN 'run'
            WHEN en IS NULL THEN 'py'
            WHEN st < {sacct.EARLIEST_TIME} OR en < {sacct.EARLIEST_TIME} OR sub < {sacct.EARLIEST_TIME}
                 OR en < st THEN 'py'
            ELSE 'ok' END AS c0
        FROM r0),
    r2 AS (
        SELECT *, CASE WHEN c0 = 'run' THEN {hi} ELSE en END AS e_raw FROM r1),
    r3 AS (
        SELECT *, greatest(st, {lo}) AS s, least(e_raw, {hi}) AS e FROM r2),
    r4 AS (
        SELECT *, CASE
            WHEN c0 NOT IN ('ok', 'run') THEN c0
            WHEN e <= s AND NOT (st = e_raw AND st >= {lo} AND st < {hi}) THEN 'outside'
            WHEN t.tres IS NULL THEN 'py'
            ELSE 'agg' END AS cls
        FROM r3 LEFT JOIN tres t ON t.tres = r3.{plan.tres}),
    r AS (
        SELECT cls, {keys_sql + "," if keys_sql else ""} {node_sql},
               CASE WHEN cls = 'agg' THEN state END AS k_state,
               CASE WHEN cls = 'agg' THEN {plan.tres} END AS k_tres,
               CASE WHEN cls = 'agg' THEN s ELSE -1 END AS s,
               CASE WHEN cls = 'agg' THEN greatest(e, s) ELSE -1 END AS e,
               CASE WHEN cls = 'agg' AND sub IS NOT NULL AND st > {lo} AND st >= sub
                    THEN st - sub END AS wait,
               CASE WHEN cls = 'py' OR {drain_sql} THEN {line} END AS line,
               {drain_sql} AS sus
        FROM r4)
    """
    if time_dim:
        sql += """
    SELECT r.* EXCLUDE (s, e, line, wait, sus), p.label AS k_period,
           count(*) AS n, count(*) FILTER (WHERE p.lo <= r.s OR p.label IS NULL) AS n_first,
           sum(CASE WHEN p.label IS NULL THEN 0 ELSE least(r.e, p.hi) - greatest(r.s, p.lo) END) AS secs,
           sum(r.e - r.s) FILTER (WHERE p.lo <= r.s) AS secs_whole,
           sum(r.wait) FILTER (WHERE p.lo <= r.s) AS wsum, count(r.wait) FILTER (WHERE p.lo <= r.s) AS wn,
           list(r.line) FILTER (WHERE r.line IS NOT NULL AND (p.lo <= r.s OR p.label IS NULL)
                                AND r.cls = 'py') AS py_lines,
           list(r.line) FILTER (WHERE r.sus AND p.lo <= r.s) AS sus_lines
    FROM r JOIN periods p ON p.hi > r.s AND p.lo < greatest(r.e, r.s + 1)
    GROUP BY ALL
    """
    else:
        sql += """
    SELECT r.* EXCLUDE (s, e, line, wait, sus), NULL AS k_period,
           count(*) AS n, count(*) AS n_first, sum(r.e - r.s) AS secs, sum(r.e - r.s) AS secs_whole,
           sum(r.wait) AS wsum, count(r.wait) AS wn,
           list(r.line) FILTER (WHERE r.line IS NOT NULL AND r.cls = 'py') AS py_lines,
           list(r.line) FILTER (WHERE r.sus) AS sus_lines
    FROM r GROUP BY ALL
    """
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    groups: Dict[Tuple, _Acc] = {}
    total = _Acc()
    total.njobs = 0
    stats = ParseStats()
    py_lines: List[str] = []
    sus_lines: List[str] = []
    lost_states = frozenset(LOST_STATES)
    nodes_cache: Dict[str, Tuple[str, ...]] = {}
    pos = by.index(time_dim) if time_dim else None
    while True:
        batch = cur.fetchmany(10000)
        if not batch:
            break
        for rec in batch:
            row = dict(zip(names, rec))
            cls = row["cls"]
            n = row["n"]
            if cls == "py":
                py_lines.extend(row["py_lines"] or ())
                continue
            if row.get("sus_lines"):
                sus_lines.extend(row["sus_lines"])
            if cls == "step":
                stats.step_rows += n
                stats.rows += n
                continue
            stats.rows += row["n_first"]
            stats.job_rows += row["n_first"]
            if cls == "filtered":
                stats.filtered_out += n
                continue
            if cls == "notstarted":
                stats.not_started += n
                continue
            if cls == "outside":
                stats.outside_window += n
                continue
            gpus, types = tres_map[row["k_tres"]]
            st = row["k_state"]
            fake = Attempt(
                "",
                "",
                row.get("k_user") or "",
                row.get("k_account") or "",
                row.get("k_partition") or "",
                row["k_nodes"] or "",
                "",
                "",
                st,
                gpus,
                types,
                None,
                0,
                0,
                0,
                0,
                False,
            )
            secs = row["secs"] or 0
            wn = row["wn"] or 0
            n_first = row["n_first"]
            # totals: whole attempts, once (their first period)
            whole = row["secs_whole"] or 0
            if n_first:
                _add(
                    total,
                    st,
                    gpus * whole,
                    (prices.priced_gpus(gpus, types) if priced else 0.0) * whole,
                    st in lost_states,
                    n_first,
                    n_first,
                    row["wsum"] or 0,
                    wn,
                )
            seen = set()  # a NodeList may name a node twice: its pieces add up, its job counts once
            for key, g, p in pieces_of(fake, by, prices if priced else None, nodes_cache):
                if pos is not None:
                    key = key[:pos] + (row["k_period"],) + key[pos + 1 :]
                acc = groups.get(key)
                if acc is None:
                    acc = groups[key] = _Acc()
                    acc.njobs = 0
                _add(
                    acc,
                    st,
                    g * secs,
                    p * secs,
                    st in lost_states,
                    0 if key in seen else n,
                    n_first,
                    row["wsum"] or 0,
                    wn,
                )
                seen.add(key)
    return groups, total, stats, py_lines, sus_lines


def _add(
    acc: _Acc, state: str, gs: float, cost: float, lost: bool, jobs: int, attempts: int, wsum: int, wn: int
) -> None:
    acc.gpu_seconds += gs
    acc.cost += cost
    acc.by_state[state] = acc.by_state.get(state, 0.0) + gs
    if lost:
        acc.lost += gs
        acc.lost_by_cause[state] = acc.lost_by_cause.get(state, 0.0) + gs
    acc.njobs = (acc.njobs or 0) + jobs
    acc.attempts += attempts
    acc.wait_sum += wsum
    acc.wait_n += wn


def _merge(into: _Acc, acc: _Acc, jobs_too: bool = True) -> None:
    into.gpu_seconds += acc.gpu_seconds
    into.cost += acc.cost
    into.lost += acc.lost
    for k, v in acc.lost_by_cause.items():
        into.lost_by_cause[k] = into.lost_by_cause.get(k, 0.0) + v
    into.suspect += acc.suspect
    into.wait_sum += acc.wait_sum
    into.wait_n += acc.wait_n
    into.attempts += acc.attempts
    for k, v in acc.by_state.items():
        into.by_state[k] = into.by_state.get(k, 0.0) + v
    if jobs_too:
        into.njobs = (into.njobs or 0) + (acc.njobs if acc.njobs is not None else len(acc.jobs))


def _merge_reference(
    groups,
    total,
    stats: ParseStats,
    py_lines: List[str],
    sus_lines: List[str],
    src: FileSource,
    window: Window,
    now,
    filters,
    by,
    prices,
    max_gpus,
    prolog_requeue_seconds,
    drains,
    lost_window_hours,
) -> None:
    """Run the reference parser and aggregator on the rows SQL left alone, and add."""
    lines: Iterable[str] = py_lines
    if src.trailing:
        lines = sacct._strip_trailing(lines, src.sep)
    attempts, py_stats = sacct.parse_rows(
        lines,
        src.columns,
        sep=src.sep,
        window=window,
        now=now,
        filters=filters,
        first_line=0,
        max_gpus=max_gpus,
    )
    if py_stats.malformed:
        raise NeedsReference(f"{py_stats.malformed} malformed or impossible row(s): line numbers")
    for name in ("rows", "job_rows", "step_rows", "not_started", "outside_window", "filtered_out"):
        setattr(stats, name, getattr(stats, name) + getattr(py_stats, name))
    lost = find_lost(attempts, prolog_requeue_seconds)
    suspect = find_suspect(attempts, drains, lost_window_hours) if drains is not None else None
    g2, t2 = accumulate(attempts, by, window_start=window.start, lost=lost, suspect=suspect, prices=prices)
    for key, acc in g2.items():
        mine = groups.get(key)
        if mine is None:
            mine = groups[key] = _Acc()
            mine.njobs = 0
        _merge(mine, acc)
    _merge(total, t2)
    if sus_lines and drains:
        s_lines: Iterable[str] = sacct._strip_trailing(sus_lines, src.sep) if src.trailing else sus_lines
        s_att, _ = sacct.parse_rows(
            s_lines,
            src.columns,
            sep=src.sep,
            window=window,
            now=now,
            filters=filters,
            first_line=0,
            max_gpus=max_gpus,
        )
        sus = find_suspect(s_att, drains, lost_window_hours)
        if sus:
            g3, t3 = accumulate(s_att, by, window_start=window.start, suspect=sus, prices=prices)
            for key, acc in g3.items():
                groups[key].suspect += acc.suspect
            total.suspect += t3.suspect
