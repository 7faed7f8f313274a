"""The engine numbers a dump's lines by their place in the table it stores them in
(``engine.read_lines``): DuckDB's parallel CSV reader must store them in the file's order.
A small fixture is one buffer and one thread; these dumps are several times DuckDB's 32 MiB
read buffer (16 x its 2 MiB largest line), so two threads read pieces of them at once."""

from __future__ import annotations

from slurmkit.report import engine, sacct
from slurmkit.report.window import resolve_window

HEADER = "JobID|JobIDRaw|State|AllocTRES|Submit|Start|End|User|JobName"
# (a job row's JobID is the number of its line, which makes each line's text its place)
NAME = "x" * 180  # (long lines: fewer of them fill the buffers, and the test writes faster)


def _dump(path, lines: int, bad: int, copy_at: int = 0) -> None:
    """``lines`` data lines after the header: a job row on each even line (JobID = its line
    number, 2 the first data line), a step on each odd one, a row with a wrong field count
    at line ``bad`` and, at line ``copy_at``, the text of line 2."""
    rows = [HEADER]
    for ln in range(2, lines + 2):
        if ln == copy_at:
            rows.append(rows[1])
        elif ln == bad:
            rows.append(f"{ln}|{ln}|COMPLETED")
        elif ln % 2 == 0:
            rows.append(f"{ln}|{ln}|COMPLETED|billing=1,gres/gpu=1|1700000000|1700000000|1700000100|u|{NAME}")
        else:
            rows.append(f"{ln - 1}.batch|{ln - 1}.batch|COMPLETED|cpu=1|1700000000|1700000000|1700000100||")
    path.write_text("\n".join(rows) + "\n")


def _numbered(path):
    src = engine.probe_file(str(path))
    plan = engine._Plan(src)
    with engine.session(threads=2) as con:
        read = engine.read_lines(con, plan)
        rows = con.execute(f"SELECT ln, f0, n FROM {plan.reader()} ORDER BY ln").fetchall()
    return src, read, rows


def test_every_line_of_a_dump_of_several_buffers_keeps_its_number(tmp_path):
    path = tmp_path / "dump.txt"
    lines = 500_000  # (about 72 MiB)
    bad = lines - 2  # an even line: a job row's place, near the end of the last buffer
    _dump(path, lines, bad)
    assert path.stat().st_size > 2 * 32 * 2**20
    src, read, rows = _numbered(path)
    assert src.first_row == 2 and read == lines
    # the job rows only (the steps are kept as the empty text, not read), each numbered from the first
    # data line as ``ln`` 1: its file line is ln + 1, which its JobID says
    assert len(rows) == lines // 2
    wrong = [(ln, f0) for ln, f0, _ in rows if str(ln + 1) != f0]
    assert wrong == []
    assert [(ln + 1, n) for ln, _, n in rows if n != 9] == [(bad, 3)]


def test_the_engine_numbers_the_bad_rows_of_a_large_dump_as_the_reference_does(tmp_path):
    """A row with a wrong field count near the end, and an exact copy of the first job row
    there (the later copy is the impossible one: which is later is the file's order)."""
    path = tmp_path / "dump.txt"
    lines = 500_000
    _dump(path, lines, bad=lines - 2, copy_at=lines - 6)
    window = resolve_window(default_unbounded=True)
    now = 1700100000
    _, ref, _ = sacct.read_sacct_file(str(path), window=window, now=now)
    assert ref.malformed_lines == [lines - 6, lines - 2]
    _, _, stats = engine.run(
        engine.probe_file(str(path)),
        window=window,
        now=now,
        filters=None,
        by=["user"],
        prices=None,
        max_gpus=sacct.DEFAULT_MAX_GPUS,
        prolog_requeue_seconds=120,
    )
    assert stats.to_dict() == ref.to_dict()


def test_a_step_row_is_the_only_line_kept_as_the_empty_text(tmp_path):
    """The line table keeps a step row's place as the empty text, which DuckDB's reader never
    gives for a line: an empty line is NULL there, and a line of blanks or of one separator is
    kept as it is. So every line but the steps reaches the fields, with its number."""
    job = "|COMPLETED|billing=1,gres/gpu=1|1700000000|1700000000|1700000100|u|n"
    step = "7.batch|7.batch|COMPLETED|cpu=1|1700000000|1700000000|1700000100||"
    lines = ["7|7" + job, step, "", "   ", "|", "8|8" + job]
    path = tmp_path / "dump.txt"
    path.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    plan = engine._Plan(engine.probe_file(str(path)))
    with engine.session() as con:
        engine.read_lines(con, plan)
        table = con.execute(f"SELECT rowid + 1, l FROM {engine.LINES} ORDER BY rowid").fetchall()
        fields = con.execute(f"SELECT ln, n, f0 FROM {plan.reader()} ORDER BY ln").fetchall()
    assert table == [(1, lines[0]), (2, ""), (3, None), (4, "   "), (5, "|"), (6, lines[5])]
    assert fields == [(1, 9, "7"), (3, None, None), (4, 1, "   "), (5, 2, ""), (6, 9, "8")]
