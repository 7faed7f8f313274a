"""The DuckDB engine of ``slurmkit report`` (the ``slurmkit[report]`` extra).

The pure-Python parser and aggregator (:mod:`.sacct`, :mod:`.aggregate`, :mod:`.lost`)
are the reference: they define every rule. This engine gives the same answer faster and
in bounded memory. It reads a saved dump **once**:

1. **Load and classify** (the only scan of the file): the dump is read as numbered lines
   and split in SQL (see :class:`_Plan`); the job rows go into a temporary table ``j``
   (step rows are only counted, by DuckDB's profile of the scan). Each keeps only the
   columns this report's rules read: its line number and a hash of the line, JobIDRaw as a
   number (a text that is not a plain number gets a negative id of its own), its times as
   epochs, and its class, decided in SQL in the reference parser's order: filtered, not
   started, malformed or impossible, outside the window, counted (the SQL is
   :func:`.rules.row_class_sql`'s). Step rows are dropped on the line, before its split. ISO
   times are converted in the scan: one regular expression checks their shape, DuckDB's cast
   to TIMESTAMP reads their fields as UTC, and a small table of UTC
   offsets (:func:`utc_offsets`, a few entries a year) built from the reference's own rule
   (:func:`slurmkit.report.sacct.hour_epoch`) gives local time and DST. The few times it
   does not decide (before 1999-12, more than a year past the report's end, a 60th second,
   a day past the month's end, garbage) are converted in a second step, only their rows,
   through their distinct hours by the reference's ``parse_time``. Malformed and impossible rows
   (a wrong field count or job id, bad times, a garbage AllocTRES, an exact duplicate of an
   earlier line of the same job) are found in SQL with the reference's reasons and line
   numbers (table ``badrows``): they cost what they are. Only the rows of a requeued job
   tied in Start, End, State and Reason but different otherwise make the dump be read again
   keeping every text field (their order needs it; rare in real data).
2. **Look-ups**: the distinct AllocTRES strings and NodeLists are few; Python turns them
   into small tables with the reference's own ``parse_gpu_tres``, ``_type_split`` and
   ``expand_hostlist``, and the day/week/month bounds come from its period splitter, so
   each rule lives in one place.
3. **Rules over attempts** in SQL: the prolog-requeue cause by a window function over the
   attempts of each requeued job in the reference's order (by Start and End, then, in the
   second reading, by content); suspect attempts by joining
   their nodes with the drain windows; the jobs with several attempts, for distinct-job
   counts.
4. **Aggregate**: one ``GROUP BY`` that also counts the classes. By row fields, one group
   per (keys, state). By a period, the attempts are grouped by the periods of their Start
   and last second, and Python spreads each group's sums over the periods between (a
   piece's GPU-seconds are linear in its attempt's times). By node or GPU type, they are
   grouped by NodeList or AllocTRES, and the grouped sums are split by the look-up tables.
   Only a view by a period *and* by node or GPU type splits every attempt into pieces in
   SQL, after a pass that counts the classes.

:class:`NeedsReference` asks the caller to run the reference path only for what the SQL
does not read: a line with a NUL byte, and an archive whose rows are out of date.

The archive (:mod:`.archive`) stores typed columns, so a report over it starts at step 1's
classification, reading only the columns and row groups it needs.

Sums of whole GPU-seconds are exact in both engines; splits by node or GPU type are
floating point and may differ from the reference in the last bits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from slurmkit.errors import UsageError
from slurmkit.report import progress, sacct
from slurmkit.report import rules as rule
from slurmkit.report.aggregate import FIELD_DIMS, TIME_DIMS, PeriodSplitter, _Acc, _nodes_of, _type_split
from slurmkit.report.cost import PriceTable
from slurmkit.report.duck import duckdb
from slurmkit.report.lost import DrainEvent
from slurmkit.report.sacct import Filters, ParseStats
from slurmkit.report.window import Window
from slurmkit.slurm.parse import ParseError, expand_hostlist

#: The delimiter of the line reader: the CSV reader splits nothing (it refuses a line with a
#: NUL byte, which sacct does not write: the reference reads such a dump).
_LINE_DELIM = "\u0000"
log = logging.getLogger("slurmkit.report")


class NeedsReference(Exception):
    """The input has rows only the reference path can read."""


class _NeedsText(Exception):
    """A dump is read again with all its text fields: rows of a requeued job tie in Start,
    End, State and Reason (their order needs the other fields)."""


@dataclass
class FileSource:
    """A saved dump as the reference reader sees it: columns, delimiter, trailing
    delimiter, and the line number of the first data row."""

    path: str
    columns: List[str]
    sep: str
    trailing: bool
    first_row: int
    #: SQL of the archive's typed relation (see :func:`slurmkit.report.archive.source`);
    #: None: read ``path`` as CSV
    relation: Optional[str] = None
    #: the archive's rows of jobs with several rows (``rid, jid, tie_rank, pflag, lflag``, see
    #: ``archive._write_multi``); None for a dump, or when out of date
    multi: Optional[str] = None


def probe_file(
    path: str, columns: Optional[Sequence[str]] = None, delimiter: Optional[str] = None
) -> Optional[FileSource]:
    """Read the head of ``path`` with the reference reader's rules (:func:`.sacct.read_dump_head`);
    ``None`` when it has no row."""
    with sacct.open_dump(path) as fh:
        head = sacct.read_dump_head(fh, columns, delimiter)
    if head is None:
        return None
    return FileSource(path, head.columns, head.sep, head.trailing, head.first_row)


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _digits(expr: str) -> str:
    """SQL: the text is 1 to 12 ASCII digits without a leading zero (a cast and back, cheaper than a
    regular expression; anything else, such as ``012``, is left to the reference)."""
    return f"coalesce(length({expr}) <= 12 AND CAST(TRY_CAST({expr} AS UBIGINT) AS VARCHAR) = {expr}, FALSE)"


def _in_list(values: Iterable[str]) -> str:
    return "(" + ", ".join(_q(v) for v in sorted(values)) + ")"


def hour_key(expr: str) -> str:
    """SQL: the ISO hour (``YYYY-MM-DDTHH``) of a time text that looks ISO, else NULL."""
    return f"(CASE WHEN length({expr}) = 19 AND substr({expr}, 5, 1) = '-' THEN left({expr}, 13) END)"


def epoch_sql(expr: str, hour_epoch: str) -> str:
    """SQL: epoch seconds of a clean time text, NULL otherwise; ``hour_epoch`` is the
    looked-up epoch of its ISO hour (local time and DST decided by Python's ``mktime``)."""
    # (any ASCII digits, leading zeros too, as the reference's ``isdigit``; up to 18, which
    # BIGINT holds: a longer one is a bad time here, an impossible or far-future one there)
    return (
        f"(CASE WHEN regexp_full_match({expr}, '[0-9]{{1,18}}') THEN CAST({expr} AS BIGINT) "
        f"WHEN {hour_epoch} IS NOT NULL AND regexp_full_match({expr}, "
        f"'[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}[T ][0-9]{{2}}:[0-5][0-9]:[0-9]{{2}}') "
        f"AND CAST(substr({expr}, 18, 2) AS INTEGER) <= 60 "
        f"THEN {hour_epoch} + 60 * CAST(substr({expr}, 15, 2) AS BIGINT) "
        f"+ CAST(substr({expr}, 18, 2) AS BIGINT) END)"
    )


def job_id_sql(job_id: str, raw: Optional[str], plain_raw: Optional[str] = None) -> str:
    """SQL of :func:`slurmkit.report.sacct.job_id_ok` (``raw`` None: the dump has no JobIDRaw);
    the plain job whose JobIDRaw equals its JobID is tested first (most rows). ``plain_raw``:
    SQL that is TRUE only when ``raw`` is 1 to 18 ASCII digits (never NULL; the scan has it
    from its cast of JobIDRaw), which spares the regular expressions of most rows."""
    shape = f"regexp_full_match({job_id}, {_q(sacct.JOB_ID_PATTERN)})"
    if raw is None:
        return f"coalesce({shape}, FALSE)"
    base = f"regexp_extract({job_id}, '^[0-9]+')"
    digits = f"regexp_full_match({raw}, '[0-9]{{1,18}}')"
    plain = plain_raw or "FALSE"
    return (
        f"coalesce(CASE WHEN {plain} AND {job_id} = {raw} THEN TRUE "
        f"WHEN {job_id} = {raw} THEN regexp_full_match({job_id}, '[0-9]{{1,18}}') "
        f"WHEN NOT {shape} OR NOT ({plain} OR {digits}) THEN FALSE "
        f"WHEN contains({job_id}, '_[') OR NOT (contains({job_id}, '_') OR contains({job_id}, '+')) "
        f"THEN {raw} = {base} "
        f"ELSE CAST({raw} AS BIGINT) >= CAST({base} AS BIGINT) END, FALSE)"
    )


class _Plan:
    """Column positions of a saved dump and the SQL that reads its fields.

    The dump is read as lines (one column, nothing split by the CSV reader) into table
    :data:`LINES` (:func:`read_lines`), in the file's order, so that a line's ``rowid`` is its
    place: its number ``ln`` is ``rowid + 1`` (1 is the line ``src.first_row``; with one column
    and the empty text as NULL, DuckDB keeps empty lines as NULL rows, so ``ln`` counts every
    line, as the reference's line numbers do; the tests check the numbers against the
    reference's), and from there with ``lh``, a hash of the whole
    line (exact duplicates). The fields are split in SQL: ``n`` is their number, and
    when the dump has JobName, the surplus fields of a row (a ``|`` in a job name) are folded
    back into it as :func:`slurmkit.slurm.parse.split_parsable2` does, wherever it is."""

    def __init__(self, src: FileSource):
        self.src = src
        cols = src.columns
        idx = {c.strip().lower(): i for i, c in enumerate(cols)}
        lacking = [c for c in sacct.REQUIRED_COLUMNS if c.lower() not in idx]
        if lacking:
            raise UsageError(f"sacct data lacks column(s) {', '.join(lacking)}; {sacct.recommended_hint()}")
        self.nf = nf = len(cols)
        self.names = [f"f{i}" for i in range(nf)]
        self.i_name = idx.get("jobname")

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
        self.reason = col("reason") or blank
        self.name = col("jobname") or blank
        self.jobid_first = idx["jobid"] == 0
        # a row with surplus fields is one only when a free-text field can take them
        self.count_ok = f"(n = {nf})" if self.i_name is None else f"(n >= {nf})"
        self.surplus = "FALSE"  # (kept for the callers' tests: the split above folds them)
        self.blank = "(n IS NULL OR (n < 2 AND trim(f0) = ''))"
        self.id_ok = job_id_sql(self.jobid, self.raw if self.raw != self.jobid else None)
        # The reference tests the first field for a dot before splitting (a line without any
        # separator is a (malformed) job row, not a step): so does the reader, on the line,
        # before its split (most of a dump's lines are steps); else the JobID field is tested.
        self.step = "FALSE" if self.jobid_first else f"({self.count_ok} AND contains({self.jobid}, '.'))"

    def shape_why(self, n_ok: str) -> str:
        """SQL: the reference's reason for a row whose field count (``n_ok`` false) or job id
        is wrong."""
        wrong = _q(f"wrong field count (expected {self.nf})")
        return f"CASE WHEN NOT {n_ok} THEN {wrong} ELSE {_q(sacct.BAD_JOB_ID)} END"

    def _line(self) -> str:
        """SQL of a line's text without ``--parsable``'s one delimiter after the last field
        (removed as the reference does)."""
        sep = _q(self.src.sep)
        if self.src.trailing:
            return f"CASE WHEN suffix(l, {sep}) THEN left(l, length(l) - {len(self.src.sep)}) ELSE l END"
        return "l"

    def lines(self) -> str:
        """SQL of ``l``: each line of the dump after the header, in the file's order; a step
        row (a dot up to the first separator, as the reference's ``find``) is kept as the
        empty text, which no line read is (a line's place is its number; an empty line is
        read as NULL, and kept). One text column and no flag column: the statement costs about
        a tenth less than with a NULL and a flag (docs/benchmarks.md, "Dirty dumps, seventh
        look")."""
        src, sep, line = self.src, _q(self.src.sep), self._line()
        lines = (
            f"read_csv({_q(src.path)}, columns={{'l': 'VARCHAR'}}, delim={_q(_LINE_DELIM)}, "
            f"quote='', escape='', header=false, skip={src.first_row - 1}, auto_detect=false, "
            f"strict_mode=true, null_padding=false, parallel=true)"
        )
        if not self.jobid_first:
            return f"SELECT l FROM {lines}"
        step = f"strpos({line}, '.') BETWEEN 1 AND strpos({line}, {sep})"
        return f"SELECT CASE WHEN {step} THEN {_q(_STEP_LINE)} ELSE l END AS l FROM {lines}"

    def reader(self) -> str:
        """SQL of a relation ``(ln, lh, n, f0, f1, ...)``: the fields of the dump's lines, from
        table :data:`LINES` (filled by :func:`read_lines`)."""
        nf, sep, line = self.nf, _q(self.src.sep), self._line()
        if self.i_name is None:
            fields = [f"s[{i + 1}] AS f{i}" for i in range(nf)]
        else:  # the surplus fields of a row go back into its JobName
            k = self.i_name
            fields = [f"s[{i + 1}] AS f{i}" for i in range(k)]
            fields.append(f"array_to_string(s[{k + 1}:{k + 1} + greatest(n - {nf}, 0)], {sep}) AS f{k}")
            fields += [f"s[{i + 1} + greatest(n - {nf}, 0)] AS f{i}" for i in range(k + 1, nf)]
        return (
            f"(SELECT ln, lh, n, {', '.join(fields)} FROM ("
            f"SELECT ln, lh, s, len(s) AS n FROM ("
            f"SELECT rowid + 1 AS ln, hash(l) AS lh, string_split({line}, {sep}) AS s "
            f"FROM {LINES} WHERE l IS DISTINCT FROM {_q(_STEP_LINE)})))"
        )


#: The temporary table of a dump's numbered lines (:func:`read_lines`).
LINES = "dump_lines"
#: What :data:`LINES` holds in place of a step row's line: the empty text, which DuckDB's
#: reader never gives for a line (an empty line is NULL)
_STEP_LINE = ""


def read_lines(con: duckdb.DuckDBPyConnection, plan: _Plan) -> int:
    """Table :data:`LINES`: ``plan``'s lines (:meth:`_Plan.lines`), stored in the file's order
    so that a line's ``rowid`` is its place (:meth:`_Plan.reader` numbers them from it; a step
    row keeps its place as the empty text). Returns the rows DuckDB's CSV reader read.

    The order is kept by DuckDB's ``preserve_insertion_order``, set for this one statement
    (:func:`session` turns it off to save memory): the parallel reader's chunks are then
    stored in the file's order, on every thread. ``row_number() OVER ()`` would number them
    too, but it is a streaming window, which DuckDB runs on one thread (docs/benchmarks.md,
    "Dirty dumps, fourth pass"). Raises ``duckdb.InvalidInputException`` for a line the reader
    refuses (a NUL byte)."""
    con.execute("PRAGMA enable_profiling = 'no_output'")
    con.execute("SET preserve_insertion_order = true")
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {LINES} AS {plan.lines()}")
        return _rows_read(con)
    finally:
        con.execute("SET preserve_insertion_order = false")
        con.execute("PRAGMA disable_profiling")


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


def hours_table(con: duckdb.DuckDBPyConnection, queries: Sequence[str]) -> None:
    """Table ``hours(key, epoch)``: the distinct ISO hours the ``queries`` select, each
    converted by the reference's ``parse_time`` (local time and DST as it decides them)."""
    union = " UNION ".join(f"SELECT DISTINCT * FROM ({q})" for q in queries)
    keys = [k for (k,) in con.execute(union).fetchall()]
    _table(con, "hours", ("key", "epoch"), ("VARCHAR", "BIGINT"), hour_table(keys))


def hour_table(keys: Iterable[Optional[str]]) -> List[Tuple[str, int]]:
    """``[(ISO hour, epoch)]`` for the hours ``parse_time`` accepts."""
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


#: What DuckDB's Python client raises (a RuntimeError) when SIGINT interrupts a query
_INTERRUPTED = "Query interrupted"


@contextlib.contextmanager
def session(threads: Optional[int] = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB connection with bounded memory. What does not fit spills to a
    private temporary directory (DuckDB's default for an in-memory database is ``.tmp`` in
    the working directory), removed afterwards. Ctrl-C during a query raises
    ``KeyboardInterrupt``, as anywhere else."""
    spill = tempfile.mkdtemp(prefix="slurmkit-duckdb-")
    try:
        con = duckdb.connect(
            config={
                "threads": threads or 2,
                "memory_limit": "768MB",
                "preserve_insertion_order": False,
                "temp_directory": spill,
            }
        )
    except BaseException:
        shutil.rmtree(spill, ignore_errors=True)
        raise
    try:
        con.execute("SET enable_progress_bar = false")
        progress.attach_connection(con)  # (a no-op unless a progress line is shown)
        yield con
    except RuntimeError as exc:
        # DuckDB answers Ctrl-C during a query with this error and drops the KeyboardInterrupt:
        # the command is given it back, so that it ends as interrupted (exit 130), not as a bug
        if str(exc) == _INTERRUPTED:
            raise KeyboardInterrupt from None
        raise
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)


# --------------------------------------------------------------------------- ISO times

#: The local days before this (1999-12-01) and after a year past the report's end are
#: converted by the second step (:func:`_convert_iso`): they are rare, and the offset table
#: stays small.
_OFFSETS_FROM = (1999, 12, 1)


def _civil_days(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's ``days_from_civil``)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def utc_offsets(last: int) -> List[Tuple[int, Optional[int]]]:
    """``[(local second, offset)]``, sorted: from each local second on (up to the next), an ISO
    time's epoch is its local seconds (its fields read as UTC) minus ``offset``, exactly as
    :func:`slurmkit.report.sacct.parse_time` computes it (``mktime`` of its hour, local time
    and DST as it decides them, plus minutes and seconds). Sampled at the first
    local midnight of each week from 1999-12-01 to the week of epoch ``last`` (zones change at
    most once a week); the week before a change is taken hour by hour."""

    def offset(day: int, hour: int) -> int:
        t = time.gmtime(day * 86400)
        return day * 86400 + hour * 3600 - sacct.hour_epoch(t.tm_year, t.tm_mon, t.tm_mday, hour)

    first = _civil_days(*_OFFSETS_FROM)
    end = first + ((last // 86400 + 9 - first) // 7) * 7
    out: List[Tuple[int, Optional[int]]] = [(first * 86400, offset(first, 0))]
    previous = out[0][1]
    for day in range(first + 7, end + 1, 7):
        now = offset(day, 0)
        if now != previous:
            for hour in range(7 * 24):  # the change happened during the week before
                o = offset(day - 7, hour)
                if o != out[-1][1]:
                    out.append(((day - 7) * 86400 + hour * 3600, o))
            if now != out[-1][1]:
                out.append((day * 86400, now))
            previous = now
    out.append((end * 86400, None))  # the end of the table: later times go to the second step
    return out


def _offset_sql(loc: str, table: Sequence[Tuple[int, Optional[int]]]) -> str:
    """SQL: the offset of local seconds ``loc`` by a binary tree of comparisons over
    :func:`utc_offsets` (a dozen or so entries a year where DST is kept; one in UTC), NULL
    outside the table."""

    def tree(lo: int, hi: int) -> str:  # entries lo..hi-1; loc >= table[lo][0]
        if hi - lo == 1:
            o = table[lo][1]
            return "NULL" if o is None else str(o)
        mid = (lo + hi) // 2
        return f"CASE WHEN {loc} < {table[mid][0]} THEN {tree(lo, mid)} ELSE {tree(mid, hi)} END"

    return f"CASE WHEN {loc} < {table[0][0]} THEN NULL ELSE {tree(0, len(table))} END"


#: the ISO times the scan converts: :func:`slurmkit.report.sacct.parse_time`'s shape with ASCII
#: digits and an hour below 24 (the reference's own tests on the fields)
_ISO_PATTERN = "[0-9]{4}-[0-9]{2}-[0-9]{2}[T ]([01][0-9]|2[0-3]):[0-9]{2}:[0-9]{2}"


def _iso_local_sql(text: str) -> str:
    """SQL: the local seconds of an ISO time text (its fields read as UTC), NULL unless it is
    ``YYYY-MM-DD``, ``T`` or a space, ``HH:MM:SS`` in ASCII digits (:data:`_ISO_PATTERN`, one
    regular expression) of a real date and time, which
    :func:`slurmkit.report.sacct.parse_time` takes too (it also takes a day past the month's
    end and a 60th second: DuckDB's cast refuses them, NULL here, for the second step).
    DuckDB's cast to TIMESTAMP skips whitespace and takes hour 24 (the next day): the pattern
    lets neither through (a fuzzed comparison with the reference, every one-character change
    of five times, found no other difference; ``strptime`` and a test per whitespace character
    cost twice as much)."""
    return (
        f"CASE WHEN regexp_full_match({text}, {_q(_ISO_PATTERN)}) "
        f"THEN CAST(epoch(TRY_CAST({text} AS TIMESTAMP)) AS BIGINT) END"
    )


# --------------------------------------------------------------------------- loading


def _filtered_sql(filters: Filters) -> str:
    conds = []
    for values, expr in (
        (filters.users, "u"),
        (filters.accounts, "a"),
        (filters.partitions, "p"),
        (filters.names, "name"),
        (filters.states, "state"),
    ):
        if values is not None:
            conds.append(f"{expr} NOT IN {_in_list(values)}" if values else "TRUE")
    return " OR ".join(conds) if conds else "FALSE"


@dataclass
class _Rules:
    """What the classification of a job row depends on."""

    lo: int
    hi: int
    filters: Filters
    #: (first clipped Start, last clipped End) of the counted rows, once classified
    span: Optional[Tuple[int, int]] = None
    #: the distinct NodeLists of the counted rows, when the class count listed them
    nodelists: Optional[List[str]] = None
    #: SQL of the index in ``periods`` of the instant ``{t}`` (see :func:`_period_table`)
    period_index: str = ""

    def inside(self) -> str:
        """The archive's rows that can touch the window (by the typed columns; Parquet row groups
        whose statistics fail it are skipped)."""
        return f"WHERE (start_s < {self.hi} OR start_s IS NULL) AND (end_s >= {self.lo} OR end_s IS NULL)"

    def derived(self, undecided: str, typed: bool = False) -> str:
        """SQL columns computed from ``st``/``en``/``sub`` (epochs, NULL when the text was not
        one) and ``t_st``/``t_en``/``t_sub`` (the text where it was not an epoch): the class of
        the row in the reference parser's order, and the clipped ``s``/``e``. A time text that is not an epoch is
        ``undecided`` (``'iso'``: converted in a second step) or ``'bad'``.

        ``typed``: the columns of the archive's relation (:func:`slurmkit.report.archive._relation`),
        which has no time texts: ingest keeps a row only when its Start is a time, and a NULL
        End or Submit is one sacct did not know (``Unknown``). The tests on the texts become
        tests on NULL: the same classes, for a quarter less of the first pass's time (reading
        and testing texts costs more than reading the epochs)."""
        if typed:
            not_started, unknown_end = "FALSE", "en IS NULL"
            undecided_sql = "st IS NULL"
        else:
            not_started, unknown_end = rule.unknown_time_sql("t_st"), rule.unknown_time_sql("t_en")
            undecided_sql = (
                f"st IS NULL OR (en IS NULL AND NOT {rule.unknown_time_sql('t_en')})"
                f" OR (sub IS NULL AND NOT {rule.unknown_time_sql('t_sub')})"
            )
        cls, s, e = rule.row_class_sql(
            filtered=_filtered_sql(self.filters),
            not_started=not_started,
            undecided=undecided_sql,
            undecided_class=undecided,
            unknown_end=unknown_end,
            state="state",
            st="st",
            en="en",
            sub="sub",
            lo=self.lo,
            hi=self.hi,
        )
        return f"{cls} AS cls, {s} AS s, {e} AS e"


def _state_sql(expr: str) -> str:
    """``CANCELLED by 0`` → ``CANCELLED``."""
    return f"split_part({expr}, ' ', 1)"


def _plain_int(name: str, shortest: int, longest: int) -> str:
    """SQL: the value of text ``r_{name}`` when it is ``shortest`` to ``longest`` plain ASCII
    digits without a leading zero, else NULL (left to the slower, exact rules); ``v_{name}``
    is its ``TRY_CAST`` to BIGINT, computed once beforehand.

    DuckDB's cast also takes ``" 12"``, ``"+12"``, ``"1_2"``, ``"1.5"``, ``"0x1f"`` and
    ``"12e2"``: the value is taken only where its own decimal text is the text, which holds for
    plain digits without a leading zero and for a minus sign before them, and where it has
    ``shortest`` to ``longest`` digits (which leaves the negative values out)."""
    v, text = f"v_{name}", f"r_{name}"
    return (
        f"CASE WHEN {v} BETWEEN {10 ** (shortest - 1)} AND {10**longest - 1} "
        f"AND CAST({v} AS VARCHAR) = {text} THEN {v} END"
    )


def _load_file(
    con: duckdb.DuckDBPyConnection,
    plan: _Plan,
    rules: _Rules,
    stats: ParseStats,
    extra: Sequence[str],
    max_gpus: int,
    full: bool = False,
) -> List[Optional[str]]:
    """Scan the dump once into table ``j``: the job rows, classified; the step rows are
    counted, not kept. Returns the distinct AllocTRES of the counted rows (None when ISO
    times were converted afterwards: the classes changed).

    ``j`` keeps only what this report's rules read, so that millions of rows fit in memory:
    JobIDRaw, the normalised State, AllocTRES, the ``extra`` text columns (see
    :func:`_extra_columns`), the times (epochs, or their text where they are not one) and the
    Reason of REQUEUED and FAILED rows (the prolog-requeue rule), the line number ``ln`` and
    the line's hash ``lh``. With ``full``, also every text field the order of a job's attempts
    reads (:class:`_NeedsText`). The malformed and impossible rows are reported into ``stats``
    with their lines (:func:`_report_bad`). Returns the distinct AllocTRES of the counted
    rows."""
    columns = {"u": plan.user, "a": plan.account, "p": plan.partition, "nl": plan.nodelist, "name": plan.name}
    # numbers: the times, epochs of 9 or 10 digits (1973 to 2286; any other text is decided by
    # the exact rules), and JobIDRaw (a fifth less to store and group than its text; a file
    # without JobIDRaw has JobID there, whose array tasks, 123_4, are text)
    numbers = {"st": (plan.start, 9, 10), "en": (plan.end, 9, 10), "sub": (plan.submit or "''", 9, 10)}
    text = {"ln": "ln", "lh": "lh", "state": _state_sql(plan.state_raw), "tres": plan.tres}
    numeric_jid = not full and plan.raw != plan.jobid
    if numeric_jid:
        numbers["jid"] = (plan.raw, 1, 18)
    else:
        text["jid"] = plan.raw
    text.update((k, columns[k]) for k in extra if k in columns)
    if full:
        text.update((k, columns[k]) for k in ("u", "a", "p", "nl"))
        text["job_id"] = plan.jobid
    text["r_reason"] = plan.reason
    inner = ", ".join(f"{v} AS {k}" for k, v in text.items())
    inner += "".join(
        # (the cast only of a text of the lengths _plain_int takes: a failing cast costs a third
        # of a scan of ISO times)
        f", TRY_CAST(CASE WHEN length({v}) BETWEEN {lo} AND {hi} THEN {v} END AS BIGINT) AS v_{k}, "
        f"{v} AS r_{k}"
        for k, (v, lo, hi) in numbers.items()
    )
    parts = ", ".join(f"v_{k}" for k in numbers)
    checked = ", ".join(f"{_plain_int(k, lo, hi)} AS {k}" for k, (_, lo, hi) in numbers.items())
    times = ("st", "en", "sub")
    texts_used = ", ".join(f"r_{k}" for k in numbers)
    # ISO times: their local seconds (o_*), less the offset of the table (see utc_offsets);
    # NULL outside it, for the second step (_convert_iso)
    offsets = utc_offsets(rules.hi + 400 * 86400)
    inner += "".join(
        f", CASE WHEN v_{k} IS NULL THEN {_iso_local_sql(numbers[k][0])} END AS o_{k}" for k in times
    )
    local = ", ".join(f"o_{k}" for k in times)
    checked = ", ".join(
        f"coalesce({_plain_int(k, lo, hi)}, o_{k} - ({_offset_sql(f'o_{k}', offsets)})) AS {k}"
        if k in times
        else f"{_plain_int(k, lo, hi)} AS {k}"
        for k, (_, lo, hi) in numbers.items()
    )
    # 4: a blank line; 1: a wrong field count or job id (the reference's reasons, in its order)
    id_ok = plan.id_ok
    if numeric_jid:  # (JobIDRaw's cast, in the same SELECT, says which are plain numbers)
        id_ok = job_id_sql(plan.jobid, plan.raw, f"({_plain_int('jid', 1, 18)}) IS NOT NULL")
    shape = (
        f"CASE WHEN {plan.blank} THEN 4 "
        f"WHEN NOT coalesce({plan.count_ok}, FALSE) OR NOT {id_ok} THEN 1 ELSE 0 END"
    )
    why = f"CASE WHEN shape = 1 THEN {plan.shape_why('n_ok')} END AS why"
    texts = ", ".join(f"CASE WHEN {k} IS NULL THEN r_{k} END AS t_{k}" for k in times)
    jt = ", CASE WHEN jid IS NULL THEN r_jid END AS jt" if numeric_jid else ""
    try:
        rows_read = read_lines(con, plan)
        con.execute(
            f"""CREATE TEMP TABLE j AS
        SELECT *, {rules.derived("iso")} FROM (
            SELECT * EXCLUDE ({texts_used}, r_reason), {texts}{jt},
                   {rule.reason_kept_sql("state", "r_reason")} AS reason FROM (
                SELECT * EXCLUDE ({parts}, {local}, n_ok), {checked}, {why} FROM (
                    SELECT {inner}, CAST({shape} AS UTINYINT) AS shape, coalesce({plan.count_ok}, FALSE) AS n_ok
                    FROM {plan.reader()} WHERE NOT coalesce({plan.step}, FALSE))))""",
        )
    except duckdb.InvalidInputException as exc:  # a line its reader refuses (a NUL byte)
        raise NeedsReference(f"DuckDB's reader: {str(exc).splitlines()[0]}") from None
    con.execute(f"DROP TABLE {LINES}")
    wrong, blank_n, rows_n, no_jid, iso = con.execute(
        """SELECT count(*) FILTER (WHERE shape = 1),
                  count(*) FILTER (WHERE shape = 4), count(*), count(*) FILTER (WHERE shape = 0 AND jid IS NULL),
                  count(*) FILTER (WHERE cls = 'iso' AND shape = 0) FROM j"""
    ).fetchone()
    con.execute("CREATE TEMP TABLE badrows (ln BIGINT, why VARCHAR)")
    stats.step_rows += rows_read - rows_n
    if wrong or blank_n:
        # malformed rows are rows (stats.rows), not job rows; blank lines neither
        stats.rows += wrong
        con.execute("INSERT INTO badrows SELECT ln, why FROM j WHERE shape = 1")
        con.execute("DELETE FROM j WHERE shape <> 0")
    if no_jid:  # JobIDRaw texts that are not plain numbers ("0123"): each its own negative id
        con.execute(
            """UPDATE j SET jid = -m.k FROM (
                SELECT jt, row_number() OVER (ORDER BY jt) AS k FROM (SELECT DISTINCT jt FROM j WHERE jid IS NULL)) m
            WHERE j.jid IS NULL AND j.jt = m.jt"""
        )
    if iso:
        _convert_iso(con, rules)
    con.execute("ALTER TABLE j DROP COLUMN why")
    tres = con.execute("SELECT list(DISTINCT tres) FILTER (WHERE cls = 'ok') FROM j").fetchone()[0] or []
    good = _bad_rows(con, tres, max_gpus)
    _dedupe(con)
    _report_bad(con, plan.src.first_row, stats)
    con.execute("ALTER TABLE j RENAME TO job_rows")
    con.execute("CREATE TEMP VIEW j AS SELECT rowid AS rid, * FROM job_rows")
    return good


def time_why_sql(
    st: str = "st",
    en: str = "en",
    sub: str = "sub",
    t_en: str = "t_en",
    t_sub: str = "t_sub",
    state: str = "state",
) -> str:
    """SQL: the reference's reason for a row that is bad by its times (in its order), over the
    epochs ``st``, ``en``, ``sub`` (NULL: not a time), the texts ``t_en``, ``t_sub`` (read only
    where their epoch is NULL) and the job state."""
    unknown_end = rule.unknown_time_sql(t_en)
    return f"""CASE
        WHEN {st} IS NULL OR ({en} IS NULL AND NOT {unknown_end}) THEN 'bad time'
        WHEN {en} IS NULL AND NOT {rule.running_sql(state)}
            THEN coalesce(nullif(trim({t_en}), ''), 'empty') || ' end time for a ' || {state} || ' job'
        WHEN {sub} IS NULL AND NOT {rule.unknown_time_sql(t_sub)} THEN 'bad time'
        ELSE {rule.impossible_time_sql(st, en, sub)} END"""


def _bad_rows(
    con: duckdb.DuckDBPyConnection, tres: Sequence[Optional[str]], max_gpus: int
) -> List[Optional[str]]:
    """Into ``badrows``, with the reference's reasons: the rows of class ``bad`` by their times,
    then the counted rows whose AllocTRES is garbage or names more than ``max_gpus`` GPUs (made
    ``bad``: the reference counts them as job rows, as it does the others). Returns the other
    AllocTRES values."""
    con.execute(f"INSERT INTO badrows SELECT ln, {time_why_sql()} FROM j WHERE cls = 'bad'")
    wrong = []
    for t in tres:
        try:
            g = sacct.parse_gpu_tres((t or "").strip())
        except ParseError:
            wrong.append((t, sacct.GARBAGE_TRES))
            continue
        if max(g[0], sum(n for _, n in g[1])) > max_gpus:
            wrong.append((t, rule.IMPOSSIBLE + "more GPUs than report.max_gpus"))
    if wrong:
        _table(con, "badtres", ("tres", "why"), ("VARCHAR", "VARCHAR"), wrong)
        con.execute("INSERT INTO badrows SELECT ln, why FROM j JOIN badtres USING (tres) WHERE cls = 'ok'")
        con.execute("UPDATE j SET cls = 'bad' WHERE cls = 'ok' AND tres IN (SELECT tres FROM badtres)")
    dropped = {t for t, _ in wrong}
    return [t for t in tres if t not in dropped]


def _dedupe(con: duckdb.DuckDBPyConnection) -> None:
    """Table ``several(jid)``: the jobs with several counted rows (by sorting the ids, faster
    than grouping millions of them). Their exact duplicates (same whole line, ``lh``) are made
    ``bad`` but the first, as the reference does (``impossible: exact duplicate``)."""
    con.execute(
        """CREATE TEMP TABLE pairs AS SELECT jid, lh, lh = previous_lh AS dup FROM (
            SELECT jid, lh, lag(jid) OVER w AS previous, lag(lh) OVER w AS previous_lh
            FROM j WHERE cls = 'ok' WINDOW w AS (ORDER BY jid, lh)) WHERE jid = previous"""
    )
    con.execute("CREATE TEMP TABLE several AS SELECT DISTINCT jid FROM pairs")
    if con.execute("SELECT count(*) FROM pairs WHERE dup").fetchone()[0]:
        con.execute(
            """CREATE TEMP TABLE dups AS SELECT ln FROM (
                SELECT ln, row_number() OVER (PARTITION BY jid, lh ORDER BY ln) AS k
                FROM j JOIN (SELECT DISTINCT jid, lh FROM pairs WHERE dup) USING (jid, lh) WHERE cls = 'ok')
            WHERE k > 1"""
        )
        con.execute(f"INSERT INTO badrows SELECT ln, {_q(sacct.DUPLICATE_ROW)} FROM dups")
        con.execute("UPDATE j SET cls = 'bad' WHERE ln IN (SELECT ln FROM dups)")
    con.execute("DROP TABLE pairs")


def _report_bad(con: duckdb.DuckDBPyConnection, first_row: int, stats: ParseStats) -> None:
    """The rows in ``badrows`` into ``stats``, as the reference reports them: counted by
    reason (in the order each first occurs), the first line numbers listed."""
    for why, n in con.execute("SELECT why, count(*) FROM badrows GROUP BY why ORDER BY min(ln)").fetchall():
        stats.malformed += n
        if why.startswith(rule.IMPOSSIBLE):
            stats.impossible += n
        stats.malformed_reasons[why] += n
    stats.malformed_lines.extend(
        first_row + ln - 1
        for (ln,) in con.execute(
            f"SELECT ln FROM badrows ORDER BY ln LIMIT {sacct.MAX_LISTED_LINES}"
        ).fetchall()
    )


def _load_relation(
    con: duckdb.DuckDBPyConnection, relation: str, rules: _Rules, extra: Sequence[str]
) -> Tuple[int, int]:
    """View ``j`` over a typed relation (the archive, :func:`slurmkit.report.archive.source`):
    the typed columns and only the ``extra`` text columns this report needs, of only the rows
    that can touch the window (DuckDB skips the other row groups by their Start and End
    statistics). A view, not a table: reading and classifying the typed columns again in
    each query costs less than materialising millions of rows once. Returns the archive's
    number of rows and of rows the filters leave out, to count the rows never read."""
    inside = rules.inside()
    cols = ", ".join(["rid", "jid", "state", "gpus", "st", "en", "sub", *extra])
    con.execute(
        f"""CREATE TEMP VIEW j AS SELECT *, {rules.derived("bad", typed=True)} FROM (
            SELECT {cols} FROM {relation.format(where=inside)})"""
    )
    filtered = _filtered_sql(rules.filters)
    return con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE {filtered}) FROM {relation.format(where='')}"
        if filtered != "FALSE"
        else f"SELECT count(*), 0 FROM {relation.format(where='')}"
    ).fetchone()


def _rows_read(con: duckdb.DuckDBPyConnection) -> int:
    """The rows DuckDB's CSV reader read in the last query, from its profile: the dump's
    non-empty lines after the header (the reader, like Python's, breaks lines at ``\n``,
    ``\r\n`` and a lone ``\r``, and skips empty ones, as the reference does)."""
    found: List[int] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("name") == "READ_CSV" and isinstance(node.get("rows_scanned"), int):
                found.append(node["rows_scanned"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(con.get_profiling_information(format="json")))
    if len(found) != 1:
        raise NeedsReference("DuckDB's profile does not give the rows its CSV reader read")
    return found[0]


def _convert_iso(con: duckdb.DuckDBPyConnection, rules: _Rules) -> None:
    """Rows whose times the scan did not decide (ISO times outside the offset table, garbage):
    epochs from their looked-up hours (:func:`slurmkit.report.sacct.parse_time`), then
    classified again; only these rows are rewritten."""
    hours_table(con, [f"SELECT {hour_key(t)} FROM j WHERE cls = 'iso'" for t in ("t_st", "t_en", "t_sub")])
    typed = ", ".join(
        f"coalesce(j.{k}, {epoch_sql('j.t_' + k, f'h{i}.epoch')}) AS {k}"
        for i, k in enumerate(("st", "en", "sub"))
    )
    joins = " ".join(
        f"LEFT JOIN hours h{i} ON h{i}.key = {hour_key('j.t_' + k)}"
        for i, k in enumerate(("st", "en", "sub"))
    )
    con.execute(
        f"""UPDATE j SET st = x.st, en = x.en, sub = x.sub, cls = x.cls, s = x.s, e = x.e FROM (
            SELECT ln, st, en, sub, {rules.derived("bad")} FROM (
                SELECT j.* EXCLUDE (st, en, sub, cls, s, e), {typed}
                FROM j {joins} WHERE j.cls = 'iso')) x
        WHERE j.ln = x.ln"""
    )


# --------------------------------------------------------------------------- rules over attempts


def _check_rows(
    con,
    max_gpus: int,
    prices: Optional[PriceTable],
    with_types: bool,
    src: "FileSource",
    typed: bool,
    rules: "_Rules",
    classes: Optional[List[Tuple]] = None,
    full: bool = False,
    with_nodes: bool = False,
) -> Dict[str, int]:
    """Counts per class; :class:`NeedsReference` for any row the reference reports by line:
    malformed or impossible, a garbage or impossible AllocTRES, an exact duplicate. ``typed``:
    ``j`` has the GPU count of each row (the archive) and the AllocTRES text only when the
    report prices or splits by GPU type. ``classes``: ``(cls, rows, max GPUs, first s, last
    e)`` when the aggregation already counted them. ``with_nodes``: the report splits by node
    (the distinct NodeLists are listed in the same pass, see :func:`_node_table`)."""
    need_tres = classes is None and (not typed or with_types or bool(prices and prices.enabled))
    if classes is None:
        # (the same pass lists the AllocTRES and NodeList values the look-up tables need)
        lists = [
            "list(DISTINCT tres) FILTER (WHERE cls = 'ok')" if need_tres else "NULL",
            "list(DISTINCT nl) FILTER (WHERE cls = 'ok')" if with_nodes else "NULL",
        ]
        found = con.execute(
            f"SELECT cls, count(*), {'max(gpus)' if typed else 'NULL'}, min(s), max(e), {', '.join(lists)} "
            "FROM j GROUP BY cls"
        ).fetchall()
        rows = [r[:5] for r in found]
        ok = next((r for r in found if r[0] == "ok"), None)
        tres_values, rules.nodelists = (ok[5] or [], ok[6] or []) if ok else ([], [])
    else:
        rows = classes
    counts = {cls: n for cls, n, *_ in rows}
    rules.span = next(((lo, hi) for cls, _, _, lo, hi in rows if cls == "ok"), None)
    if typed and counts.get("bad"):  # (a dump's are in ``badrows``, see _load_file)
        raise NeedsReference(f"{counts['bad']} malformed or impossible row(s): line numbers")
    most = max((m for cls, _, m, *_ in rows if cls == "ok" and m is not None), default=None)
    if most is not None and most > max_gpus:
        raise NeedsReference("more GPUs than report.max_gpus: line numbers")
    if need_tres:  # (with ``classes``, the first pass made the table it needed already)
        _tres_tables(con, tres_values, max_gpus, prices, with_types)
    _multi_rows(con, src, typed, rules, full)
    return counts


def _multi_rows(con, src: "FileSource", typed: bool, rules: "_Rules", full: bool) -> None:
    """Table ``mrows``: the counted rows of the jobs with several of them, which all rules over a
    job's attempts need (distinct jobs, the prolog-requeue rule, duplicates), with
    ``tie_rank`` (the job's rows in :data:`.rules.TIE_ORDER`, after Start and End), ``pflag``
    and ``lflag`` (the Reason flags of the prolog rule, :func:`.rules.flags_sql`); table ``multi(jid, n, requeued)``. The archive keeps these
    for its jobs with several rows (``src.multi``), so a report over it groups no job ids.
    A dump's rows are put in order by Start, End, State and Reason (see :func:`_prolog`);
    :class:`_NeedsText` when that does not decide it in a requeued job, unless ``full`` (the dump was read with all its text fields, see
    :func:`_load_file`)."""
    if typed:
        if src.multi is None:
            raise NeedsReference(
                "the archive's list of jobs with several rows is out of date (run report ingest)"
            )
        cols = con.execute("SELECT * FROM j LIMIT 0").description
        keep = ", ".join([d[0] for d in cols] + ["tie_rank", "pflag", "lflag"])
        con.execute(
            f"""CREATE TEMP TABLE mrows AS SELECT {keep} FROM (
                SELECT *, {rules.derived("bad", typed=True)} FROM {src.multi.format(where=rules.inside())})
                WHERE cls = 'ok'"""
        )
    else:
        # ``several`` (the jobs with several counted rows) was made with the dump's duplicates
        # (see _dedupe); a job left with one row is no multi-row job (``multi`` below)
        several = "JOIN several USING (jid) WHERE j.cls = 'ok'"
        if not full:
            con.execute(
                f"CREATE TEMP TABLE mrows AS SELECT j.*, {rule.flags_sql('reason')}, 0 AS tie_rank FROM j {several}"
            )
            # Rows of a requeued job tied in Start and End are put in order by the leading fields
            # of the tie order this table keeps, State and Reason (see _prolog); rows that tie in
            # those too but differ in other fields are put in order by their content
            # (rules.TIE_ORDER), which this table does not keep.
            kept = ", ".join(rule.tie_prefix_columns(_KEPT_TIE_COLUMNS))
            if con.execute(
                f"""SELECT count(*) FROM mrows
                WHERE jid IN (SELECT jid FROM mrows GROUP BY jid HAVING {rule.requeued_job_sql("state")})
                GROUP BY jid, st, e, {kept} HAVING count(*) > 1 LIMIT 1"""
            ).fetchall():
                raise _NeedsText("rows of a requeued job tied in Start, End, State and Reason")
        else:
            # (JobName, the order's last text field, is left out: two attempts tied on everything
            # before it are the same in every sum, whichever comes first)
            con.execute(
                f"""CREATE TEMP TABLE mrows AS
                SELECT j.*, {rule.flags_sql("reason")},
                       row_number() OVER (PARTITION BY jid ORDER BY {rule.tie_order_sql(_TIE_COLUMNS)}) AS tie_rank
                FROM j JOIN tres t ON t.tres = j.tres {several}"""
            )
    con.execute(
        f"""CREATE TEMP TABLE multi AS
        SELECT jid, count(*) AS n, {rule.requeued_job_sql("state")} AS requeued
        FROM mrows GROUP BY jid HAVING count(*) > 1"""
    )


#: the SQL columns of :data:`.rules.TIE_ORDER`'s fields in a dump's table ``j`` read with every
#: text field (joined with ``tres t``), and in the table read with only some (see _multi_rows)
_TIE_COLUMNS = {
    "state": "state",
    "reason": "reason",
    "job_id": "job_id",
    "tres": "t.ord",
    "nodelist": "nl",
    "user": "u",
    "account": "a",
    "partition": "p",
    "name": None,
    "submit": "coalesce(sub, -1)",
}
_KEPT_TIE_COLUMNS = {"state": "state", "reason": "reason"}


def _distinct(con, column: str, table: str = "j") -> List[Optional[str]]:
    """The distinct values of ``column`` over the counted rows of ``table``."""
    return [v for (v,) in con.execute(f"SELECT DISTINCT {column} FROM {table} WHERE cls = 'ok'").fetchall()]


def _tres_tables(
    con,
    values: Iterable[Optional[str]],
    max_gpus: int,
    prices: Optional[PriceTable],
    with_types: bool = False,
    name: str = "tres",
) -> None:
    """``tres(tres, gpus, pg, ord)``: GPU count, priced GPUs and the rank of the parsed value
    (for the attempt order) of each distinct AllocTRES in ``values``, by the reference's
    ``parse_gpu_tres``; for the ``gpu_type`` split, ``ts(tres, gtype, w, pw)``."""
    parsed = {}
    for t in values:
        try:
            g = sacct.parse_gpu_tres((t or "").strip())
        except ParseError:
            raise NeedsReference("garbage AllocTRES: line numbers") from None
        if max(g[0], sum(n for _, n in g[1])) > max_gpus:
            raise NeedsReference("more GPUs than report.max_gpus: line numbers")
        parsed[t] = g
    ranks = {v: i for i, v in enumerate(sorted(set(parsed.values())))}
    priced = bool(prices and prices.enabled)
    _table(
        con,
        name,
        ("tres", "gpus", "pg", "ord"),
        ("VARCHAR", "BIGINT", "DOUBLE", "BIGINT"),
        [(t, g[0], prices.priced_gpus(*g) if priced else 0.0, ranks[g]) for t, g in parsed.items()],
    )
    if with_types:
        rows = []
        for t, (gpus, types) in parsed.items():
            for i, (gtype, n) in enumerate(_type_split(_TypeView(gpus, types))):  # type: ignore[arg-type]
                rows.append((t, gtype, float(n), n * (prices.price(gtype) if priced else 0.0), i == 0))
        _table(
            con,
            "ts",
            ("tres", "gtype", "w", "pw", "first"),
            ("VARCHAR", "VARCHAR", "DOUBLE", "DOUBLE", "BOOLEAN"),
            rows,
        )


class _TypeView:
    """The two fields :func:`aggregate._type_split` reads from an attempt."""

    __slots__ = ("gpus", "gpu_types")

    def __init__(self, gpus: int, gpu_types):
        self.gpus, self.gpu_types = gpus, gpu_types


def _prolog(con, prolog_requeue_seconds: float, typed: bool) -> None:
    """Table ``prolog(rid)``: FAILED attempts right after a prolog-failure requeue of the same
    job (:func:`.rules.follows_prolog_requeue_sql`), in the order of :func:`.rules.order_key`:
    by Start, End and ``tie_rank`` (the archive's rank is the whole tie order), then a dump's by
    the leading tie fields its table keeps, State and Reason (rows equal in these are equal to
    the rule, see :func:`_multi_rows`)."""
    order = "st, e, tie_rank"
    if not typed:
        order += ", " + rule.tie_order_sql(_KEPT_TIE_COLUMNS, prefix=True)
    con.execute(
        f"""CREATE TEMP TABLE prolog AS
        WITH o AS (
            SELECT rid, state, lflag, lag(state) OVER w AS pstate, lag(pflag) OVER w AS ppflag,
                   lag(e - st) OVER w AS pdur
            FROM mrows WHERE jid IN (SELECT jid FROM multi WHERE requeued)
            WINDOW w AS (PARTITION BY jid ORDER BY {order}))
        SELECT rid FROM o
        WHERE {rule.follows_prolog_requeue_sql("pstate", "ppflag", "pdur", "state", "lflag", prolog_requeue_seconds)}"""
    )


def _suspect(con, drains: Sequence[DrainEvent], hours: float) -> None:
    """Table ``sus(rid)``: attempts that ran on a node within ``hours`` before it was drained
    (the rule of :func:`slurmkit.report.lost.reference_suspect`)."""
    span = hours * 3600.0
    by_node: Dict[str, List[Tuple[float, float]]] = {}
    for ev in drains:
        by_node.setdefault(ev.node, []).append((ev.timestamp - span, ev.timestamp))
    rows: List[Tuple[str, float, float]] = []
    first = min(a for lst in by_node.values() for a, _ in lst)
    last = max(b for lst in by_node.values() for _, b in lst)
    for (nl,) in con.execute(
        f"SELECT DISTINCT nl FROM j WHERE cls = 'ok' AND e >= {first!r} AND st <= {last!r}"
    ).fetchall():
        try:
            nodes = expand_hostlist(nl)
        except ParseError:
            continue
        for node in nodes:
            rows.extend((nl, lo, b) for lo, b in by_node.get(node, ()))
    _table(con, "dn", ("nl", "lo", "hi"), ("VARCHAR", "DOUBLE", "DOUBLE"), rows)
    con.execute(
        """CREATE TEMP TABLE sus AS SELECT DISTINCT j.rid FROM j JOIN dn ON dn.nl = j.nl
           WHERE j.cls = 'ok' AND j.st <= dn.hi AND j.e >= dn.lo"""
    )


# --------------------------------------------------------------------------- the report


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
    """The report's accumulators and parse statistics for a saved dump or the archive."""
    now_i = int(now if now is not None else time.time())
    args = (src, by, prices, max_gpus, prolog_requeue_seconds, drains, lost_window_hours, threads)
    try:
        return _run(_Rules(window.start, min(window.end, now_i), filters or Filters()), *args)
    except _NeedsText as exc:  # (rare in real data)
        log.info("duckdb engine: %s; reading the dump again with every text field", exc)
        return _run(_Rules(window.start, min(window.end, now_i), filters or Filters()), *args, full=True)


def _run(
    rules: _Rules,
    src: FileSource,
    by: Sequence[str],
    prices: Optional[PriceTable],
    max_gpus: int,
    prolog_requeue_seconds: float,
    drains: Optional[Sequence[DrainEvent]],
    lost_window_hours: float,
    threads: Optional[int],
    full: bool = False,
) -> Tuple[Dict[Tuple, _Acc], _Acc, ParseStats]:
    stats = ParseStats()
    typed = src.relation is not None
    priced = bool(prices and prices.enabled)
    with session(threads) as con:
        extra = _extra_columns(by, rules.filters, priced, bool(drains))
        tres_values: Optional[List[str]] = None
        if src.relation is None:
            tres_values = _load_file(con, _Plan(src), rules, stats, extra, max_gpus, full)
        else:
            everything, filtered_all = _load_relation(con, src.relation, rules, extra)
        # one pass over the rows gives the class counts and the sums (see _one_pass); the
        # checks that may hand the report to the reference follow it
        fused = _one_pass(by)
        partial = None
        if fused:
            if any(d in TIME_DIMS for d in by):
                rules.span = _span_bound(con, rules, src)
            if priced or not typed:
                values = tres_values if tres_values is not None else _distinct(con, "tres")
                _tres_tables(con, values, max_gpus, prices, False)
            if drains:
                _suspect(con, drains, lost_window_hours)
            partial = _first_pass(con, by, rules, priced, bool(drains), typed, max_gpus, prices)
        counts = _check_rows(
            con,
            max_gpus,
            prices,
            "gpu_type" in by,
            src,
            typed,
            rules,
            partial.classes if partial else None,
            full,
            with_nodes="node" in by,
        )
        if typed:  # the archive's rows outside the window were not read: count them as the reference
            pruned_filtered = filtered_all - counts.get("filtered", 0)
            stats.filtered_out += pruned_filtered
            stats.outside_window += everything - sum(counts.values()) - pruned_filtered
        stats.job_rows += sum(counts.values()) + stats.outside_window + stats.filtered_out
        stats.rows += stats.step_rows + stats.job_rows
        stats.filtered_out += counts.get("filtered", 0)
        stats.not_started += counts.get("notstarted", 0)
        stats.outside_window += counts.get("outside", 0)
        _prolog(con, prolog_requeue_seconds, typed)
        if drains and not fused:
            _suspect(con, drains, lost_window_hours)
        groups, total = _aggregate(con, by, rules, priced, bool(drains), typed, partial)
    return groups, total, stats


def _one_pass(by: Sequence[str]) -> bool:
    """Whether :func:`_first_pass` answers the view in one pass over the rows: by row fields,
    and either one period or the GPU type and/or the node. A view by a period and by the GPU
    type or the node is split attempt by attempt in SQL, after a pass that counts the classes
    and lists the values the look-up tables need."""
    periods = sum(d in TIME_DIMS for d in by)
    looked_up = any(d in _LOOKUPS for d in by)
    return all(d in FIELD_DIMS or d in TIME_DIMS or d in _LOOKUPS for d in by) and not (periods and looked_up)


#: the dimensions an attempt is split by through a look-up table of its AllocTRES or NodeList
_LOOKUPS = ("gpu_type", "node")


#: a window up to this long bounds the period tables as it is (no query for the rows' own span)
_SPAN_AS_WINDOW = 2 * 366 * 86400


def _span_bound(con, rules: _Rules, src: FileSource) -> Tuple[int, int]:
    """Bounds of the counted rows' clipped times before their classes are counted (for the
    period tables): the window when it is up to two years long; else a dump's from its table,
    the archive's from the earliest Start of the row groups read (one column) and the window's
    end."""
    if rules.hi - rules.lo <= _SPAN_AS_WINDOW:
        return rules.lo, rules.hi
    if src.relation is not None:
        first = con.execute(f"SELECT min(st) FROM {src.relation.format(where=rules.inside())}").fetchone()[0]
        return (max(rules.lo, first) if first is not None else rules.hi - 1), rules.hi
    lo, hi = con.execute("SELECT min(s), max(e) FROM j WHERE cls = 'ok'").fetchone()
    return (lo, hi) if lo is not None else (rules.hi - 1, rules.hi)


def _extra_columns(by: Sequence[str], filters: Filters, priced: bool, drains: bool) -> List[str]:
    """The text columns a report reads beyond the ones every report reads (JobIDRaw, State,
    the times, AllocTRES for a dump and the GPU count for the archive)."""
    need = []
    for col, dim, values in (
        ("u", "user", filters.users),
        ("a", "account", filters.accounts),
        ("p", "partition", filters.partitions),
    ):
        if dim in by or values is not None:
            need.append(col)
    if "node" in by or drains:
        need.append("nl")
    if "gpu_type" in by or priced:
        need.append("tres")
    if filters.names is not None:
        need.append("name")
    return need


def _attempts_sql(
    lo: int, with_sus: bool, typed: bool, priced: bool, table: str = "j", only_counted: bool = True
) -> str:
    """The counted attempts of ``table`` with their GPUs, priced GPUs, suspect flag, the lost
    cause their final state gives (the prolog-requeue cause is added afterwards, see
    :func:`_aggregate`) and the queue wait the reference counts (Start strictly inside the
    window, at or after Submit)."""
    sus = "sus.rid IS NOT NULL" if with_sus else "FALSE"
    join_sus = "LEFT JOIN sus ON sus.rid = j.rid" if with_sus else ""
    if typed:  # the archive: j has the GPU count; AllocTRES only when priced or split by type
        gpus, tres = "", "LEFT JOIN tres t ON t.tres = j.tres" if priced else ""
        pg = "t.pg" if priced else "CAST(0 AS DOUBLE)"
    else:
        # (LEFT: the table has the AllocTRES of the counted rows, and the first pass also
        # counts the others)
        gpus, tres, pg = "t.gpus,", "LEFT JOIN tres t ON t.tres = j.tres", "t.pg"
    return f"""SELECT j.*, {gpus} {pg} AS pg, {sus} AS sus,
           {rule.queue_wait_sql("j.st", "j.sub", lo)} AS wait,
           {rule.lost_cause_sql("j.state")} AS cause
        FROM {table} j {tres} {join_sus}
        WHERE {"j.cls = 'ok'" if only_counted else "TRUE"}"""


#: the row fields a view groups by, in the attempts of :func:`_attempts_sql`
_FIELD_SQL = {"user": "a.u", "account": "a.a", "partition": "a.p", "state": "a.state"}


def _fold(acc: _Acc, state: str, cause: Optional[str], gs, cost, n, wsum, wn, sgs) -> None:
    gs = gs or 0
    acc.gpu_seconds += gs
    acc.cost += cost or 0.0
    acc.by_state[state] = acc.by_state.get(state, 0.0) + gs
    if cause is not None:
        rule.add_lost(acc, cause, gs)
    acc.suspect += sgs or 0
    acc.attempts += n
    acc.wait_sum += wsum or 0
    acc.wait_n += wn


def _aggregate(
    con,
    by: Sequence[str],
    rules: _Rules,
    priced: bool,
    with_sus: bool,
    typed: bool,
    partial: Optional["_FirstPass"] = None,
) -> Tuple[Dict[Tuple, _Acc], _Acc]:
    """Groups and totals in one pass over the counted attempts: each attempt in one group
    when grouping by row fields only, else split into pieces by GPU type, node and period;
    plain sums by (keys, state, lost cause). Then two corrections from the few rows of jobs
    with several attempts (table ``mrows``): a job counts once per group (:func:`_repeats`),
    and a FAILED attempt after a prolog-failure requeue is lost (:func:`_prolog`)."""

    def attempts(table: str) -> str:
        return _attempts_sql(rules.lo, with_sus, typed, priced, table)

    if partial is not None:
        groups, total, pieces = partial.groups, partial.total, partial.pieces
        main = pieces.format(attempts=attempts("j"))
    else:
        groups, total = {}, _Acc()
        total.njobs = 0
        pieces = _pieces_sql(con, by, rules)
        main = pieces.format(attempts=attempts("j"))
        _sum_groups(con, main, len(pieces.keys), groups, total, pieces.split)
    repeated = pieces.format(attempts=attempts("mrows") + " AND j.jid IN (SELECT jid FROM multi)")
    _repeats(con, repeated, len(pieces.keys), groups)
    if pieces.node_repeats:  # a NodeList naming a node twice: two pieces of one job in one group
        # (jobs with several attempts were counted back above, all their pieces together)
        single = f"SELECT * FROM ({main}) WHERE node_repeated AND jid NOT IN (SELECT jid FROM multi)"
        _repeats(con, single, len(pieces.keys), groups)
    total.njobs = total.attempts - con.execute("SELECT coalesce(sum(n - 1), 0) FROM multi").fetchone()[0]
    # the prolog-requeue cause: these FAILED attempts were summed with no cause
    marked = pieces.format(attempts=attempts("mrows") + " AND j.rid IN (SELECT rid FROM prolog)")
    late: Optional[float] = None  # the marked attempts' whole GPU-seconds, added to the total once
    for row in _sum_rows(con, marked, len(pieces.keys), pieces.split):
        key, gs, tgs = tuple(row[: len(pieces.keys)]), row[len(pieces.keys) + 2] or 0, row[-6] or 0
        rule.add_lost(groups[key], rule.PROLOG_CAUSE, gs)
        late = (0.0 if late is None else late) + tgs
    if late is not None:
        rule.add_lost(total, rule.PROLOG_CAUSE, late)
    return groups, total


@dataclass
class _FirstPass:
    """Sums of the counted rows and the class counts of all rows, from one pass over ``j``."""

    groups: Dict[Tuple, _Acc]
    total: _Acc
    pieces: "_Pieces"
    classes: List[Tuple]


def _first_pass(
    con,
    by: Sequence[str],
    rules: _Rules,
    priced: bool,
    with_sus: bool,
    typed: bool,
    max_gpus: int,
    prices: Optional[PriceTable],
) -> _FirstPass:
    """Sums by (keys, state) of the counted rows and the count of every class, in one pass
    over the rows (a state's lost cause is the state, see :func:`.rules.lost_cause`): by row fields (each
    attempt is one piece), by row fields and a period (:func:`_period_first_pass`), or by
    row fields and the GPU type and/or the node (:func:`_lookup_first_pass`)."""
    everything = _attempts_sql(rules.lo, with_sus, typed, priced, "j", only_counted=False)
    if any(d in _LOOKUPS for d in by):
        return _lookup_first_pass(con, by, rules, everything, priced, with_sus, max_gpus, prices)
    pieces = _pieces_sql(con, by, rules)
    nk = len(pieces.keys)
    if pieces.split:
        return _period_first_pass(con, by, rules, pieces, everything, priced, with_sus)
    kref = "".join(f"k{i}, " for i in range(nk))
    # (an aggregate the report does not need is NULL: each costs ~10 % of the pass)
    cost = "sum(pg * secs)" if priced else "NULL::DOUBLE"
    sgs = "CAST(sum(gpus * secs) FILTER (WHERE sus) AS BIGINT)" if with_sus else "NULL::BIGINT"
    con.execute(
        f"""CREATE TEMP TABLE first_pass AS
        SELECT cls, {kref} state, CAST(sum(gpus * secs) AS BIGINT) AS gs, {cost} AS cost,
               count(*) AS n, CAST(sum(wait) AS BIGINT) AS wsum, count(wait) AS wn, {sgs} AS sgs,
               max(gpus) AS most, min(s) AS lo, max(e) AS hi
        FROM ({pieces.format(attempts=everything)}) GROUP BY ALL"""
    )
    classes = con.execute(
        "SELECT cls, sum(n), max(most), min(lo), max(hi) FROM first_pass GROUP BY cls"
    ).fetchall()
    # one row per group, its states' sums as lists: a year's report by account and user has
    # ~4,000 groups of ~8 states, and Python folds lists faster than rows. (BIGINT sums:
    # Python converts them faster than DuckDB's 128-bit ones; a sum that does not fit fails
    # the query, and the reference answers.)
    rows = con.execute(
        f"""SELECT {kref} CAST(sum(gs) AS BIGINT), sum(coalesce(cost, 0)), CAST(sum(n) AS BIGINT),
               CAST(sum(coalesce(wsum, 0)) AS BIGINT), CAST(sum(wn) AS BIGINT),
               CAST(sum(coalesce(sgs, 0)) AS BIGINT), list(state), list(gs)
        FROM first_pass WHERE cls = 'ok' GROUP BY ALL HAVING count(*) > 0"""  # (no keys: one row, or none)
    ).fetchall()
    groups: Dict[Tuple, _Acc] = {}
    lost = rule.lost_states()
    for row in rows:
        gs, cost, n, wsum, wn, sgs, states, by_state = row[nk:]
        acc = groups[row[:nk]] = _Acc()
        acc.gpu_seconds, acc.cost, acc.suspect = gs, cost, sgs
        acc.attempts = acc.njobs = n
        acc.wait_sum, acc.wait_n = wsum, wn
        acc.by_state = dict(zip(states, by_state))
        if not lost.isdisjoint(states):  # (a state's lost cause is the state, see _attempts_sql)
            for s, v in acc.by_state.items():
                if s in lost:
                    rule.add_lost(acc, s, v)
    return _FirstPass(groups, _first_pass_total(con, "gs", "cost", "sgs"), pieces, classes)


def _first_pass_total(con, gsecs: str, cost: str, suspect: str) -> _Acc:
    """The totals of the counted rows of ``first_pass``, by state (``gsecs``, ``cost``,
    ``suspect``: its columns of the whole attempts' GPU-seconds, cost and suspect GPU-seconds;
    the distinct jobs are counted afterwards, see :func:`_aggregate`)."""
    total = _Acc()
    total.njobs = 0
    for state, gs, cost_sum, n, wsum, wn, sgs in con.execute(
        f"SELECT state, sum({gsecs}), sum({cost}), sum(n), sum(wsum), sum(wn), sum({suspect}) "
        "FROM first_pass WHERE cls = 'ok' GROUP BY state"
    ).fetchall():
        _fold(total, state, rule.lost_cause(state), gs, cost_sum, n, wsum, wn, sgs)
    return total


def _period_first_pass(
    con, by: Sequence[str], rules: _Rules, pieces: "_Pieces", everything: str, priced: bool, with_sus: bool
) -> _FirstPass:
    """The first pass of a view by row fields and a period, without splitting any attempt in
    SQL (making each attempt's list of periods and joining their bounds cost most of the pass).

    Attempts are grouped by their keys, state and the periods ``i0`` of their Start and
    ``i1`` of their last second. An attempt in one period is one piece. One over several
    periods has a piece in each: ``[s, hi(i0))``, the whole periods between, ``[lo(i1), e)``.
    The sums of such pieces are linear in the attempts' sums: ``sum(g * (hi - s)) = hi *
    sum(g) - sum(g * s)``, so the pass sums ``g``, ``g * s`` and ``g * e`` (times measured from
    the span's start, to keep them small; whole GPU-seconds stay integers and so exact) and
    Python spreads them over the periods. Queue waits and attempts count in the period of
    the Start, as in the reference."""
    nk = len(pieces.keys)
    at = next(i for i, d in enumerate(by) if d in TIME_DIMS)
    keys = "".join(f"{_FIELD_SQL[d]} AS k{i}, " for i, d in enumerate(by) if i != at)
    origin = (rules.span or (rules.lo, rules.hi))[0]

    def sums(name: str, value: Optional[str], only: str = "") -> str:
        """``{name}``: the sum over whole attempts; ``{name}0/s/e``: of ``value``, ``value * s``
        and ``value * e`` (NULL when the report does not need it: no prices, no drains)."""
        if value is None:
            return f"NULL AS {name}, NULL AS {name}0, NULL AS {name}s, NULL AS {name}e"
        return (
            f"sum({value} * (e - s)){only} AS {name}, sum({value}){only} AS {name}0, "
            f"sum({value} * (s - {origin})){only} AS {name}s, sum({value} * (e - {origin})){only} AS {name}e"
        )

    con.execute(
        f"""CREATE TEMP TABLE first_pass AS
        SELECT cls, {keys} i0, i1, state, count(*) AS n, sum(wait) AS wsum, count(wait) AS wn,
               {sums("g", "gpus")}, {sums("c", "pg" if priced else None)},
               {sums("u", "gpus" if with_sus else None, " FILTER (WHERE sus)")},
               max(gpus) AS most, min(s) AS lo, max(e) AS hi
        FROM ({_with_periods(rules, everything, counted_only=True)}) a
        GROUP BY ALL"""
    )
    classes = con.execute(
        "SELECT cls, sum(n), max(most), min(lo), max(hi) FROM first_pass GROUP BY cls"
    ).fetchall()
    periods = {
        i: (label, lo - origin, hi - origin)
        for i, label, lo, hi in con.execute("SELECT idx, label, lo, hi FROM periods").fetchall()
    }
    groups: Dict[Tuple, _Acc] = {}
    total = _Acc()
    total.njobs = 0
    rows = con.execute("SELECT * EXCLUDE (cls, most, lo, hi) FROM first_pass WHERE cls = 'ok'").fetchall()
    for row in rows:
        i0, i1, state, n, wsum, wn, *linear = row[nk - 1 :]
        g, g0, gs, ge, c, c0, cs, ce, u, u0, us, ue = (v or 0 for v in linear)
        head = row[: nk - 1]
        cause = rule.lost_cause(state)
        _fold(total, state, cause, g, c, n, wsum, wn, u)
        if i0 == i1:
            parts = [(i0, g, c, u)]
        else:
            first_hi, last_lo = periods[i0][2], periods[i1][1]
            parts = [(i0, first_hi * g0 - gs, first_hi * c0 - cs, first_hi * u0 - us)]
            for i in range(i0 + 1, i1):
                span = periods[i][2] - periods[i][1]
                parts.append((i, span * g0, span * c0, span * u0))
            parts.append((i1, ge - last_lo * g0, ce - last_lo * c0, ue - last_lo * u0))
        for i, piece_gs, piece_cost, piece_sgs in parts:
            key = (*head[:at], periods[i][0], *head[at:])
            acc = groups.get(key)
            if acc is None:
                acc = groups[key] = _Acc()
                acc.njobs = 0
            first = i == i0
            _fold(
                acc,
                state,
                cause,
                piece_gs,
                piece_cost,
                n if first else 0,
                wsum if first else 0,
                wn if first else 0,
                piece_sgs,
            )
            acc.njobs += n
    return _FirstPass(groups, total, pieces, classes)


def _lookup_first_pass(
    con,
    by: Sequence[str],
    rules: _Rules,
    everything: str,
    priced: bool,
    with_sus: bool,
    max_gpus: int,
    prices: Optional[PriceTable],
) -> _FirstPass:
    """The first pass of a view by row fields and the GPU type and/or the node, without
    splitting any attempt row by row (the join with the look-up tables multiplies the rows).

    Attempts are grouped by their keys, state and AllocTRES and/or NodeList: a few distinct
    values, which are all the look-up tables need. A piece's GPU-seconds are its share of
    its attempt's (the node's even share, the type's GPUs), so each group's sums are split
    by joining the small grouped table with the look-up tables."""
    keys = [f"{_FIELD_SQL[d]} AS f{i}" for i, d in enumerate(by) if d in FIELD_DIMS]
    typed_split, node_split = "gpu_type" in by, "node" in by
    if typed_split:
        keys.append("a.tres AS tres")
    if node_split:
        keys.append("a.nl AS nl")

    def sums(name: str, value: Optional[str]) -> str:
        """``{name}``: the sum of ``value`` over whole attempts, ``{name}_sus``: over the suspect ones."""
        if value is None:
            return f"NULL AS {name}, NULL AS {name}_sus"
        sus = f"sum({value}) FILTER (WHERE sus)" if with_sus else "NULL"
        return f"sum({value}) AS {name}, {sus} AS {name}_sus"

    con.execute(
        f"""CREATE TEMP TABLE first_pass AS
        SELECT cls, {", ".join(keys)}, state, count(*) AS n, sum(wait) AS wsum, count(wait) AS wn,
               {sums("g", "gpus * (e - s)")}, {sums("c", "pg * (e - s)" if priced else None)},
               {sums("t", "e - s" if typed_split else None)},
               max(gpus) AS most, min(s) AS lo, max(e) AS hi
        FROM ({everything}) a GROUP BY ALL"""
    )
    classes = con.execute(
        "SELECT cls, sum(n), max(most), min(lo), max(hi) FROM first_pass GROUP BY cls"
    ).fetchall()
    if typed_split:
        _tres_tables(con, _distinct(con, "tres", "first_pass"), max_gpus, prices, True)
    if node_split:
        rules.nodelists = _distinct(con, "nl", "first_pass")
    pieces = _pieces_sql(con, by, rules)
    # a piece's share of its attempt: of the type's GPUs (of all its time; a job with no GPU
    # is one piece of no GPU), and/or the node's even share
    joins, share, gsecs = [], "1.0", "g"
    if typed_split:
        joins.append("JOIN ts ON ts.tres = a.tres")
        share, gsecs = "ts.w", "t"
    if node_split:
        joins.append("JOIN nodes n ON n.nl = a.nl")
        share = f"{share} * n.share"
    cost = "ts.pw * n.share" if typed_split and node_split else "ts.pw" if typed_split else None
    piece_keys = ", ".join(
        f"f{i} AS k{i}" if d in FIELD_DIMS else f"{'ts.gtype' if d == 'gpu_type' else 'n.node'} AS k{i}"
        for i, d in enumerate(by)
    )
    groups: Dict[Tuple, _Acc] = {}
    nk = len(by)
    for row in con.execute(
        f"""SELECT {piece_keys}, state, sum({share} * {gsecs}), sum({f"{cost} * t" if cost else f"{share} * c"}),
               sum(n), sum(wsum), sum(wn), sum({share} * {gsecs}_sus)
        FROM first_pass a {" ".join(joins)} WHERE cls = 'ok' GROUP BY ALL"""
    ).fetchall():
        key, (state, gs, cost_sum, n, wsum, wn, sgs) = row[:nk], row[nk:]
        acc = groups.get(key)
        if acc is None:
            acc = groups[key] = _Acc()
            acc.njobs = 0
        _fold(acc, state, rule.lost_cause(state), gs, cost_sum, n, wsum, wn, sgs)
        acc.njobs += n  # (each piece is one attempt in its group; see _repeats)
    return _FirstPass(groups, _first_pass_total(con, "g", "c", "g_sus"), pieces, classes)


class _Pieces(str):
    """SQL of the pieces of ``{attempts}``, with its group keys ``k0..``; ``whole`` marks one
    piece per attempt (its first period, first node, first GPU type), which carries the
    attempt's own totals (``wgs``, ``wpg``)."""

    keys: Sequence[str] = ()
    node_repeats: bool = False
    split: bool = True


def _pieces_sql(con, by: Sequence[str], rules: _Rules) -> _Pieces:
    joins, keys, whole = [], [], ["TRUE"]
    g, pc = "CAST(a.gpus AS DOUBLE)", "a.pg"
    secs, first = "(a.e - a.s)", "TRUE"
    source = "({attempts}) a"
    node_repeats = False
    split = not all(d in FIELD_DIMS for d in by)
    if not split:
        g = "a.gpus"
    for d in by:
        if d in FIELD_DIMS:
            keys.append(_FIELD_SQL[d])
        elif d == "gpu_type":
            joins.append("JOIN ts ON ts.tres = a.tres")
            keys.append("ts.gtype")
            whole.append("ts.first")
            ratio = f"(CASE WHEN a.gpus = 0 THEN 1.0 ELSE {g} / a.gpus END)"
            g, pc = f"(ts.w * {ratio})", f"(ts.pw * {ratio})"
        elif d == "node":
            node_repeats = _node_table(con, rules.nodelists)
            joins.append("JOIN nodes n ON n.nl = a.nl")
            keys.append("n.node")
            whole.append("n.first")
            g, pc = f"({g} * n.share)", f"({pc} * n.share)"
        else:
            _period_table(con, d, rules)
            # the periods an attempt touches: from the one holding its start to the one holding
            # its last second
            source = (
                "(SELECT *, unnest(range(i0, i1 + 1)) AS pidx FROM ("
                + _with_periods(rules, "{attempts}", counted_only=False)
                + ")) a"
            )
            joins.append("JOIN periods per ON per.idx = a.pidx")
            keys.append("per.label")
            secs, first = "(least(a.e, per.hi) - greatest(a.s, per.lo))", "(per.lo <= a.s)"
            whole.append("(per.lo <= a.s)")
    sql = _Pieces(
        f"""SELECT {_keys_sql(keys)} a.cls, a.s, a.e, a.state, a.cause, a.jid, a.sus, a.wait, {g} AS gpus, {pc} AS pg,
               {secs} AS secs, {first} AS is_first, {" AND ".join(whole)} AS whole,
               a.gpus * (a.e - a.s) AS wgs, a.pg * (a.e - a.s) AS wpg,
               {"n.repeated" if node_repeats else "FALSE"} AS node_repeated
            FROM {source} {" ".join(joins)}"""
    )
    sql.keys, sql.node_repeats, sql.split = keys, node_repeats, split
    return sql


def _keys_sql(keys: Sequence[str]) -> str:
    return "".join(f"{k} AS k{i}, " for i, k in enumerate(keys))


def _sum_rows(con, pieces_sql: str, nk: int, split: bool = True) -> List[Tuple]:
    """Per (k0.., state, cause): the pieces' GPU-seconds, cost, attempts, waits, suspect
    GPU-seconds and row count, then the same for whole attempts (the totals; without
    ``split`` each attempt is one piece and the same sums serve)."""
    kref = "".join(f"k{i}, " for i in range(nk))
    if not split:
        return [
            row + row[nk + 2 : nk + 7] + (row[nk + 7],)
            for row in con.execute(
                f"""SELECT {kref} state, cause, sum(gpus * secs), sum(pg * secs), count(*), sum(wait),
                       count(wait), sum(gpus * secs) FILTER (WHERE sus), count(*)
                FROM ({pieces_sql}) GROUP BY ALL"""
            ).fetchall()
        ]
    return con.execute(
        f"""SELECT {kref} state, cause, sum(gpus * secs), sum(pg * secs), count(*) FILTER (WHERE is_first),
               sum(wait) FILTER (WHERE is_first), count(wait) FILTER (WHERE is_first),
               sum(gpus * secs) FILTER (WHERE sus), count(*),
               sum(wgs) FILTER (WHERE whole), sum(wpg) FILTER (WHERE whole), count(*) FILTER (WHERE whole),
               sum(wait) FILTER (WHERE whole), count(wait) FILTER (WHERE whole),
               sum(wgs) FILTER (WHERE whole AND sus)
        FROM ({pieces_sql}) GROUP BY ALL"""
    ).fetchall()


def _sum_groups(
    con, pieces_sql: str, nk: int, groups: Dict[Tuple, _Acc], total: _Acc, split: bool = True
) -> None:
    """Fold :func:`_sum_rows` into ``groups`` and ``total``; each group's ``njobs`` starts as
    its number of pieces (see :func:`_repeats`)."""
    for row in _sum_rows(con, pieces_sql, nk, split):
        key = tuple(row[:nk])
        acc = groups.get(key)
        if acc is None:
            acc = groups[key] = _Acc()
            acc.njobs = 0
        state, cause, gs, cost, n, wsum, wn, sgs, rows, tgs, tcost, tn, twsum, twn, tsgs = row[nk:]
        _fold(acc, state, cause, gs, cost, n, wsum, wn, sgs)
        acc.njobs += rows
        _fold(total, state, cause, tgs, tcost, tn, twsum, twn, tsgs)


def _repeats(con, pieces_sql: str, nk: int, groups: Dict[Tuple, _Acc]) -> None:
    """A job counts once per group: subtract, per group, the pieces of a job beyond its first
    (``pieces_sql`` holds the pieces of the only jobs that can repeat)."""
    kref = "".join(f"k{i}, " for i in range(nk))
    sql = f"""SELECT {kref} sum(c - 1) FROM (
            SELECT {kref} count(*) AS c FROM ({pieces_sql}) GROUP BY {kref} jid) GROUP BY ALL"""
    for row in con.execute(sql).fetchall():
        if row[nk]:
            groups[tuple(row[:nk])].njobs -= row[nk]


def _node_table(con, nodelists: Optional[List[str]]) -> bool:
    """``nodes(nl, node, share, repeated, first)``: each NodeList's nodes (one row per
    occurrence) and the even share of each, by the reference's own expansion, whether it names
    a node twice, and its first node. Returns whether any NodeList names a node twice."""
    rows = []
    any_repeated = False
    cache: Dict[str, Tuple[str, ...]] = {}
    for nl in nodelists if nodelists is not None else _distinct(con, "nl"):
        ns = _nodes_of(nl, cache)
        repeated = len(set(ns)) < len(ns)
        any_repeated = any_repeated or repeated
        rows.extend((nl, node, 1.0 / len(ns), repeated, i == 0) for i, node in enumerate(ns))
    _table(
        con,
        "nodes",
        ("nl", "node", "share", "repeated", "first"),
        ("VARCHAR", "VARCHAR", "DOUBLE", "BOOLEAN", "BOOLEAN"),
        rows,
    )
    return any_repeated


#: more runs of equal periods than this (many DST changes or months in the span): a look-up
MAX_PERIOD_RUNS = 40


def _period_table(con, unit: str, rules: _Rules) -> None:
    """``periods(label, lo, hi, idx)``: the local days, weeks or months the counted attempts
    touch, in order, and ``rules.period_index``: SQL of the index of the period holding an
    instant ``{t}`` of the span.

    The periods are contiguous. Consecutive ones of one length (the days between two DST
    changes, the weeks, a single month) form a run, in which the index is arithmetic:
    ``idx0 + (t - lo0) // length``, so a year of days in a zone with DST is five runs and in
    UTC one. That costs a fraction of a join per row; past :data:`MAX_PERIOD_RUNS` runs the
    index comes from ``buckets(b, idx)``, the period of each 15-minute bucket (``t // 900``:
    every UTC offset in use is a multiple of 15 minutes, so a bucket lies in one period;
    PeriodSplitter relies on it too)."""
    lo, hi = rules.span or (rules.lo, rules.hi)
    # through hi itself: a span read from the data ends at the last End, and a zero-length
    # attempt there has its instant (its one piece) at hi, the first second of a period
    rows = [(label, a, b, i) for i, (label, a, b) in enumerate(_periods(unit, lo, hi + 1))]
    _table(con, "periods", ("label", "lo", "hi", "idx"), ("VARCHAR", "BIGINT", "BIGINT", "BIGINT"), rows)
    runs: List[Tuple[int, int, int]] = []  # (first lo, length, first idx)
    for _, a, b, i in rows:
        if not runs or b - a != runs[-1][1]:
            runs.append((a, b - a, i))
    if len(runs) <= MAX_PERIOD_RUNS:
        arms = [f"{i} + ({{t}} - {a}) // {length}" for a, length, i in runs]
        rules.period_index = (
            "".join(f"CASE WHEN {{t}} < {nxt[0]} THEN {arm} ELSE " for arm, nxt in zip(arms, runs[1:]))
            + arms[-1]
            + " END" * (len(runs) - 1)
        )
        return
    rules.period_index = ""
    con.execute(
        "CREATE TEMP TABLE buckets AS SELECT unnest(range(lo // 900, hi // 900)) AS b, idx FROM periods"
    )


def _with_periods(rules: _Rules, source: str, counted_only: bool) -> str:
    """``source`` with ``i0`` and ``i1``: the indexes in ``periods`` of each attempt's start
    and last second (a zero-length attempt: its start's), NULL for rows not counted when
    ``counted_only`` (:func:`_period_table` says how they are found)."""
    ends = (("b0", "i0", "a.s"), ("b1", "i1", "greatest(a.e - 1, a.s)"))

    def only(sql: str) -> str:
        return f"CASE WHEN a.cls = 'ok' THEN {sql} END" if counted_only else sql

    if rules.period_index:
        cols = ", ".join(f"{only(rules.period_index.format(t=t))} AS {i}" for _, i, t in ends)
        return f"SELECT a.*, {cols} FROM ({source}) a"
    joins = " ".join(f"LEFT JOIN buckets {b} ON {b}.b = {only(f'{t} // 900')}" for b, _, t in ends)
    return f"SELECT a.*, b0.idx AS i0, b1.idx AS i1 FROM ({source}) a {joins}"
