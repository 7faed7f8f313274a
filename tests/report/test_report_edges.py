"""The report's rules at their exact edges, deterministically, in every engine: the list path
(the reference), the streaming path and DuckDB (file and archive).

Each test was written against a one-line mutation the generated-dump tests let through
(issue 30): the prolog-requeue boundary (exactly 120 s) read with ``<``, GPUs counted
from the typed TRES keys, an attempt starting exactly at a drain no longer suspect, a
RUNNING copy of an attempt beating the finished one in one dump, and a GPU with no
utilisation reading taken for 0 %.
"""

from __future__ import annotations

import pytest

from slurmkit.report import sacct
from slurmkit.report.aggregate import finish, reference_accumulate
from slurmkit.report.efficiency import JobEfficiency, from_summary
from slurmkit.report.lost import (
    DEFAULT_PROLOG_REQUEUE_SECONDS,
    PROLOG_CAUSE,
    DrainEvent,
    is_prolog_requeue,
    reference_lost,
    reference_suspect,
)
from slurmkit.report.stream import StreamingAggregator
from slurmkit.report.window import resolve_window

BASE = 1792800000
NOW = BASE + 10 * 86400
WINDOW = resolve_window(default_unbounded=True)


def row(
    jid="7",
    state="COMPLETED",
    tres="gres/gpu=2",
    start=BASE,
    end=BASE + 3600,
    nodes="node1",
    reason="None",
    job_id=None,
):
    """One sacct line in :data:`~slurmkit.report.sacct.FIELDS` order (epoch times)."""
    end_s = end if isinstance(end, str) else str(end)
    fields = [job_id or jid, jid, state, tres, str(BASE - 60), str(start), end_s, "0"]
    return "|".join(fields + ["alice", "ops", "gpu", nodes, reason, "train"])


def dump(tmp_path, *lines, name="dump.txt"):
    path = tmp_path / name
    path.write_text("|".join(sacct.FIELDS) + "\n" + "".join(line + "\n" for line in lines))
    return str(path)


def _list_path(path, drains, hours):
    attempts, _, _ = sacct.read_sacct_file(path, window=WINDOW, now=NOW)
    lost = reference_lost(attempts, DEFAULT_PROLOG_REQUEUE_SECONDS)
    suspect = reference_suspect(attempts, drains, hours) if drains is not None else None
    groups, total = reference_accumulate(attempts, [], window_start=WINDOW.start, lost=lost, suspect=suspect)
    return finish(groups, total, [], priced=False, health=drains is not None)


def _stream(path, drains, hours):
    agg = StreamingAggregator(
        [],
        window_start=WINDOW.start,
        prolog_requeue_seconds=DEFAULT_PROLOG_REQUEUE_SECONDS,
        drains=drains,
        lost_window_hours=hours,
    )
    sacct.read_sacct_file(path, window=WINDOW, now=NOW, sink=agg.add)
    return finish(*agg.result(), [], priced=False, health=drains is not None)


def _duckdb_run(src, drains, hours):
    from slurmkit.report import engine

    groups, total, _ = engine.run(
        src,
        window=WINDOW,
        now=NOW,
        filters=None,
        by=[],
        prices=None,
        max_gpus=sacct.DEFAULT_MAX_GPUS,
        prolog_requeue_seconds=DEFAULT_PROLOG_REQUEUE_SECONDS,
        drains=drains,
        lost_window_hours=hours,
    )
    return finish(groups, total, [], priced=False, health=drains is not None)


def _duckdb(path, drains, hours):
    pytest.importorskip("duckdb")
    from slurmkit.report import engine

    return _duckdb_run(engine.probe_file(path), drains, hours)


def _archive(path, drains, hours):
    pytest.importorskip("duckdb")
    import os

    from slurmkit.report import archive, engine

    directory = os.path.join(os.path.dirname(path), "archive")
    archive.ingest(directory, engine.probe_file(path))
    return _duckdb_run(archive.source(directory), drains, hours)


ENGINES = {"list": _list_path, "stream": _stream, "duckdb": _duckdb, "archive": _archive}


def totals(path, engine_name, drains=None, hours=6.0):
    return ENGINES[engine_name](path, drains, hours).totals


# --------------------------------------------------------------------------- prolog requeue: exactly 120 s


def _requeue_then_fail(tmp_path, requeued_for: int, reason: str = "None") -> str:
    return dump(
        tmp_path,
        row(state="REQUEUED", start=BASE, end=BASE + requeued_for, reason=reason),
        row(state="FAILED", start=BASE + 600, end=BASE + 600 + 3600),
    )


def test_is_prolog_requeue_at_exactly_the_boundary():
    attempts, _ = sacct.parse_rows(
        [row(state="REQUEUED", end=BASE + s) for s in (119, 120, 121)],
        list(sacct.FIELDS),
        sep="|",
        window=WINDOW,
        now=NOW,
    )
    assert [is_prolog_requeue(a, 120) for a in attempts] == [True, True, False]
    assert DEFAULT_PROLOG_REQUEUE_SECONDS == 120


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("requeued_for, lost", [(0, True), (119, True), (120, True), (121, False)])
def test_a_failure_after_a_requeue_of_exactly_120_s_is_lost_in_every_engine(
    tmp_path, engine_name, requeued_for, lost
):
    t = totals(_requeue_then_fail(tmp_path, requeued_for), engine_name)
    assert t["lost_by_cause"].get(PROLOG_CAUSE) == (2.0 if lost else None), t
    assert t["lost_by_cause"]["REQUEUED"] == pytest.approx(2 * requeued_for / 3600, abs=1e-6)


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
def test_a_long_requeue_naming_the_prolog_is_a_prolog_requeue(tmp_path, engine_name):
    t = totals(_requeue_then_fail(tmp_path, 3600, reason="launch_failed_requeued_held"), engine_name)
    assert t["lost_by_cause"].get(PROLOG_CAUSE) == 2.0


# --------------------------------------------------------------------------- GPUs: typed and untyped keys


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize(
    "tres, gpus",
    [
        ("gres/gpu:h100=2,gres/gpu=8", 8),  # the untyped total wins over an inconsistent split
        ("gres/gpu=8,gres/gpu:h100=2", 8),
        ("gres/gpu:h100=8,gres/gpu=2", 2),
        ("gres/gpu:h100=2,gres/gpu:a100=1", 3),  # only typed keys: their sum
        ("gres/gpumem=80G,gres/gpu=1", 1),
    ],
)
def test_gpus_are_the_untyped_total_in_every_engine(tmp_path, engine_name, tres, gpus):
    t = totals(dump(tmp_path, row(tres=tres)), engine_name)
    assert t["gpu_hours"] == pytest.approx(gpus), t


# --------------------------------------------------------------------------- suspect: exactly at a drain


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize(
    "start, end, suspect",
    [
        (BASE + 7200, BASE + 10800, True),  # starts exactly at the drain
        (BASE + 7201, BASE + 10800, False),  # one second after it
        (BASE, BASE + 7200 - 6 * 3600, None),  # ends exactly when the window opens (6 h before)
        (BASE - 7 * 3600, BASE + 7200 - 6 * 3600 - 1, False),  # ends one second before
        (BASE, BASE + 3600, True),  # inside the window
    ],
)
def test_an_attempt_starting_exactly_at_a_drain_is_suspect_in_every_engine(
    tmp_path, engine_name, start, end, suspect
):
    if end < start:  # (BASE - 6 h + 2 h) ends before it starts: shift the whole attempt earlier
        start, end = end - 3600, end
    t = totals(dump(tmp_path, row(start=start, end=end)), engine_name, [DrainEvent("node1", BASE + 7200)])
    hours = 2 * (end - start) / 3600
    if suspect is None:
        suspect = True  # the window is closed at both ends
    assert t["suspect_gpu_hours"] == pytest.approx(hours if suspect else 0.0, abs=1e-6), t


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
def test_a_drain_of_another_node_marks_nothing(tmp_path, engine_name):
    t = totals(
        dump(tmp_path, row(start=BASE + 7200, end=BASE + 10800)),
        engine_name,
        [DrainEvent("node2", BASE + 7200)],
    )
    assert t["suspect_gpu_hours"] == 0.0


# --------------------------------------------------------------------------- one attempt, a RUNNING and a finished copy


@pytest.mark.parametrize("running_first", [True, False])
def test_the_finished_copy_of_an_attempt_wins_within_one_dump(tmp_path, running_first):
    pytest.importorskip("duckdb")
    from slurmkit.report import archive, engine

    running = row(state="RUNNING", end="Unknown")
    done = row(state="COMPLETED", end=BASE + 3600)
    lines = [running, done] if running_first else [done, running]
    path = dump(tmp_path, *lines)
    directory = str(tmp_path / "archive")
    assert archive.ingest(directory, engine.probe_file(path))["rows"] == 1
    kept = [line.split(archive.SEP) for line in archive.lines(directory)]
    assert [(f[2], f[6]) for f in kept] == [("COMPLETED", str(BASE + 3600))], kept


def test_of_two_finished_copies_the_later_end_wins(tmp_path):
    pytest.importorskip("duckdb")
    from slurmkit.report import archive, engine

    path = dump(tmp_path, row(state="COMPLETED", end=BASE + 60), row(state="COMPLETED", end=BASE + 3600))
    directory = str(tmp_path / "archive")
    archive.ingest(directory, engine.probe_file(path))
    kept = [line.split(archive.SEP) for line in archive.lines(directory)]
    assert [f[6] for f in kept] == [str(BASE + 3600)]


# --------------------------------------------------------------------------- efficiency: no reading is unknown


def _job(gpus=2, elapsed=3600.0):
    return JobEfficiency(job_id="1", gpus=gpus, elapsed_s=elapsed)


def test_a_gpu_without_a_utilisation_reading_is_unknown_not_zero():
    job = _job(gpus=2)
    summary = {
        "nodes": {"node1": {"gpus": {"0": {"u": 80.0, "t": 3600.0, "p": 1}, "1": {"t": 3600.0, "p": 1}}}}
    }
    from_summary(job, summary, idle_below=5.0)
    assert job.gpus_known == 1
    assert job.util_pct == pytest.approx(80.0)  # over the known GPU only, not (80 + 0) / 2
    assert job.unknown_gpu_h == pytest.approx(1.0)
    assert job.gpus_idle == 0  # the unread GPU is not an idle one
    by_gpu = {e["gpu"]: e for e in job.per_gpu}
    assert by_gpu["1"]["util_pct"] is None and by_gpu["0"]["util_pct"] == pytest.approx(80.0)
    assert "gave no utilisation" in job.note


@pytest.mark.parametrize(
    "reading", [{"t": 3600.0}, {"u": None, "t": 3600.0}, {"u": "nan"}, {"u": 50.0, "a": "off"}]
)
def test_no_gpu_with_a_reading_leaves_the_job_unknown(reading):
    job = _job(gpus=1)
    from_summary(job, {"nodes": {"node1": {"gpus": {"0": dict(reading)}}}}, idle_below=5.0)
    assert job.gpus_known == 0 and job.util_pct is None
    assert job.gpus_idle is None and job.gpus_touched is None
    assert job.unknown_gpu_h == pytest.approx(1.0)


def test_a_reading_of_zero_is_a_known_idle_gpu():
    job = _job(gpus=1)
    from_summary(job, {"nodes": {"node1": {"gpus": {"0": {"u": 0.0, "t": 3600.0, "p": 0}}}}}, idle_below=5.0)
    assert job.gpus_known == 1 and job.util_pct == 0.0 and job.gpus_idle == 1
