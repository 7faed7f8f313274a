#!/usr/bin/env python3
"""Benchmark: the pieces of the report engine's scan against the other ways DuckDB offers to
do them, on a saved dump (docs/benchmarks.md, "Dirty dumps, sixth look" and "seventh look").

    TZ=UTC .venv/bin/python benchmarks/report_sql_pieces.py /tmp/r26-dirty-1m.txt --runs 5

Each figure is the fastest of ``--runs`` wall times on two threads (as the engine runs), over
the dump's job rows (JobID without a dot), which are first stored in a table:

* reading: the engine's line reader (every line, a step kept as the empty text for its
  place), the same with a step kept as NULL and a flag column (the engine's before the
  seventh look), the lines read and split in one statement, and DuckDB's column reader (every
  field a VARCHAR, rejected rows kept, or ignored) and with ``row_number()``;
* splitting a line: ``string_split`` (the engine's), ``split_part`` per field,
  ``regexp_split_to_array``;
* ISO times, three a row: the engine's regular expression and cast, each alone,
  ``try_strptime``, ``LIKE``, one regular expression over the three joined, the cast checked
  by its own text (``round trip``).

Then the exactness of the cheaper ISO ways: every one- and two-character change of a few times,
converted by each way and compared with the reference's ``parse_time`` (run with ``TZ=UTC``).

The dump's first line must be its header with ``|`` between the fields, and JobID, Submit,
Start and End must be among them (as ``report_gen_dirty.py`` writes them).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import duckdb

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from slurmkit.report import engine, sacct  # noqa: E402

ISO = engine._ISO_PATTERN


def best(con: duckdb.DuckDBPyConnection, sql: str, runs: int, setup: str = "") -> float:
    times = []
    for _ in range(runs):
        if setup:
            con.execute(setup)
        t0 = time.perf_counter()
        con.execute(sql).fetchall()
        times.append(time.perf_counter() - t0)
    return min(times)


#: ISO ways that look cheaper, for the exactness check (``{x}``: the text)
CHEAPER = {
    "the engine's (regular expression, cast)": engine._iso_local_sql("{x}"),
    "LIKE, a digit first, try_strptime": (
        "CASE WHEN ({x} LIKE '____-__-__T__:__:__' OR {x} LIKE '____-__-__ __:__:__') "
        "AND ascii({x}) BETWEEN 48 AND 57 "
        "THEN CAST(epoch(try_strptime(replace({x}, ' ', 'T'), '%Y-%m-%dT%H:%M:%S')) AS BIGINT) END"
    ),
    "round trip: cast, checked by its text": (
        "CASE WHEN CAST(TRY_CAST({x} AS TIMESTAMP) AS VARCHAR) = replace({x}, 'T', ' ') "
        "THEN CAST(epoch(TRY_CAST({x} AS TIMESTAMP)) AS BIGINT) END"
    ),
    "LIKE, a digit first, hour < 24, cast": (
        "CASE WHEN ({x} LIKE '____-__-__T__:__:__' OR {x} LIKE '____-__-__ __:__:__') "
        "AND ascii({x}) BETWEEN 48 AND 57 AND substr({x}, 12, 2) < '24' "
        "THEN CAST(epoch(TRY_CAST({x} AS TIMESTAMP)) AS BIGINT) END"
    ),
}


def exactness() -> None:
    base = ["2026-11-03T10:05:09", "2026-11-03 23:59:59", "2024-02-29T00:00:00"]
    base += ["2025-02-28T23:59:60", "2025-02-29T10:00:00", "2025-12-31T23:59:59"]
    chars = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "+", "-", "a", "\u0663", "0", "9", "2", "4"]
    chars += ["T", "t", ":", "/", "Z", ".", "_", "e"]
    texts = set(base) | {"2026-11-03T24:00:00", "2026-11-03 24:00:00", "2026-11-03T10:60:00"}
    for b in base:
        for i in range(len(b)):
            for c in chars:
                texts.add(b[:i] + c + b[i + 1 :])  # replaced
                texts.add((b[:i] + c + b[i:])[:19])  # inserted, the end cut
                texts.add(c + b[:i] + b[i + 1 :])  # one left out, one in front
                for c2 in chars[:8]:
                    texts.add(b[:i] + c + c2 + b[i + 2 :])  # two replaced
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT unnest(?) AS x", [sorted(texts)])
    print(f"ISO exactness over {len(texts):,} texts (TZ={os.environ.get('TZ', 'unset')})")
    for label, expr in CHEAPER.items():
        got = con.execute(f"SELECT x, {expr.replace('{x}', 'x')} FROM t").fetchall()
        converted = wrong = 0
        example = ""
        for text, value in got:
            if value is None:
                continue
            converted += 1
            sacct.clear_time_caches()
            try:
                ref = sacct.parse_time(text)
            except ValueError:
                ref = None
            if ref != value:
                wrong += 1
                example = example or repr(text)
        print(f"  {label:40s} {converted} converted, {wrong} wrong {example}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with open(args.dump, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("|")
    idx = {name.lower(): i for i, name in enumerate(header)}
    nf = len(header)
    con = duckdb.connect(
        config={"threads": 2, "memory_limit": "768MB", "temp_directory": tempfile.mkdtemp(prefix="pieces-")}
    )
    path = args.dump.replace("'", "''")
    lines = (
        f"read_csv('{path}', columns={{'l': 'VARCHAR'}}, delim='\x01', quote='', escape='', header=false, "
        "skip=1, auto_detect=false, strict_mode=true, null_padding=false, parallel=true)"
    )
    step = "coalesce(strpos(l, '.') BETWEEN 1 AND strpos(l, '|'), FALSE)"
    columns = "{" + ", ".join(f"'f{i}': 'VARCHAR'" for i in range(nf)) + "}"
    fields = (
        f"read_csv('{path}', columns={columns}, delim='|', quote='', escape='', header=false, skip=1, "
        "auto_detect=false, strict_mode=true, null_padding=false, parallel=true, store_rejects=true)"
    )
    drop = "DROP TABLE IF EXISTS x"
    print(f"{args.dump}: {nf} fields, best of {args.runs}")
    print("reading (CREATE TABLE, order kept)")
    con.execute("SET preserve_insertion_order = true")
    for label, sql in (
        ("line reader (the engine's)", engine._Plan(engine.probe_file(args.dump)).lines()),
        (
            "line reader, NULL and a flag",
            f"SELECT CASE WHEN {step} THEN NULL ELSE l END AS l, {step} AS step FROM {lines}",
        ),
        (
            "lines read and split",
            f"SELECT hash(l) AS lh, string_split(l, '|') AS s FROM {lines} WHERE NOT {step}",
        ),
        ("column reader", f"SELECT * FROM {fields} WHERE NOT contains(f0, '.')"),
        (
            "column reader, errors ignored",
            f"SELECT * FROM {fields.replace('store_rejects', 'ignore_errors')} WHERE NOT contains(f0, '.')",
        ),
        (
            "column reader, row_number()",
            f"SELECT * FROM (SELECT *, row_number() OVER () AS rn FROM {fields}) WHERE NOT contains(f0, '.')",
        ),
    ):
        print(f"  {label:34s} {best(con, f'CREATE TABLE x AS {sql}', args.runs, drop):.3f} s")
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"CREATE TABLE t AS SELECT l FROM {lines} WHERE NOT {step}")
    n = con.execute("SELECT count(*) FROM t").fetchone()[0]
    need = [idx[c] for c in ("jobid", "jobidraw", "state", "alloctres", "submit", "start", "end", "user")]
    print(f"splitting {n:,} job rows, {len(need)} fields used")
    for label, sql in (
        (
            "string_split (the engine's)",
            f"SELECT sum(hash(n, {', '.join(f's[{i + 1}]' for i in need)})) FROM "
            "(SELECT s, len(s) AS n FROM (SELECT string_split(l, '|') AS s FROM t))",
        ),
        (
            "split_part per field",
            f"SELECT sum(hash(n, {', '.join(f'split_part(l, chr(124), {i + 1})' for i in need)})) FROM "
            "(SELECT l, length(l) - length(replace(l, '|', '')) + 1 AS n FROM t)",
        ),
        (
            "regexp_split_to_array",
            f"SELECT sum(hash(n, {', '.join(f's[{i + 1}]' for i in need)})) FROM "
            "(SELECT s, len(s) AS n FROM (SELECT regexp_split_to_array(l, '\\|') AS s FROM t))",
        ),
    ):
        print(f"  {label:34s} {best(con, sql, args.runs):.3f} s")
    cols = [idx["submit"] + 1, idx["start"] + 1, idx["end"] + 1]
    con.execute(
        f"CREATE TABLE times AS SELECT s[{cols[0]}] AS a, s[{cols[1]}] AS b, s[{cols[2]}] AS c FROM "
        "(SELECT string_split(l, '|') AS s FROM t)"
    )
    print("ISO times (Submit, Start, End of each job row)")
    for label, expr in (
        ("length (a floor)", "length({x})"),
        ("regular expression", f"regexp_full_match({{x}}, '{ISO}')"),
        ("TRY_CAST AS TIMESTAMP", "CAST(epoch(TRY_CAST({x} AS TIMESTAMP)) AS BIGINT)"),
        ("both (the engine's)", engine._iso_local_sql("{x}")),
        ("round trip", CHEAPER["round trip: cast, checked by its text"]),
        ("try_strptime", "CAST(epoch(try_strptime({x}, '%Y-%m-%dT%H:%M:%S')) AS BIGINT)"),
        ("LIKE", "{x} LIKE '____-__-__T__:__:__'"),
        ("TRY_CAST AS BIGINT", "TRY_CAST({x} AS BIGINT)"),
    ):
        sql = "SELECT sum(hash(" + ", ".join(expr.replace("{x}", x) for x in "abc") + ")) FROM times"
        print(f"  {label:34s} {best(con, sql, args.runs):.3f} s")
    three = f"{ISO}\\|{ISO}\\|{ISO}"
    sql = f"SELECT sum(hash(regexp_full_match(a || '|' || b || '|' || c, '{three}'))) FROM times"
    print(f"  {'one expression over the three':34s} {best(con, sql, args.runs):.3f} s")
    exactness()


if __name__ == "__main__":
    main()
