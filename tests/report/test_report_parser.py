"""The sacct row parser against hand-written dumps whose totals are worked out in
the fixture comments (tests/report/fixtures/*.txt)."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmkit.errors import UsageError
from slurmkit.report import sacct
from slurmkit.report.window import Window, resolve_window

NOV = dict(since="2026-11-01", until="2026-12-01")
NOW = "2026-12-01T01:30:00"


def nov_window():
    return resolve_window(**NOV)


def now_epoch():
    return time.mktime((2026, 12, 1, 1, 30, 0, 0, 0, -1))


def by_id(attempts):
    out = {}
    for a in attempts:
        out.setdefault(a.job_id, []).append(a)
    return out


def read(fixture_path, name="basic.txt", window=None, **kw):
    window = window or nov_window()
    attempts, stats, _ = sacct.read_sacct_file(fixture_path(name), window=window, now=now_epoch(), **kw)
    return attempts, stats


def test_basic_fixture_total_and_counts(fixture_path):
    attempts, stats = read(fixture_path)
    assert sum(a.gpu_seconds for a in attempts) / 3600 == pytest.approx(62.0)
    assert len(attempts) == 16
    assert len({a.job_id_raw for a in attempts}) == 15
    assert stats.malformed == 0
    assert stats.not_started == 1  # 114 PENDING
    assert stats.step_rows == 8


def test_step_rows_are_skipped_and_job_total_is_used(fixture_path):
    jobs = by_id(read(fixture_path)[0])
    assert not any("." in j for j in jobs)
    # 101: gres/gpu=16 on 2 nodes is the job total (steps say 8 and 16; neither is added)
    (a,) = jobs["101"]
    assert a.gpus == 16 and a.gpu_types == (("h100", 16),)
    assert a.gpu_seconds == 16 * 3600


def test_typed_gpus_are_not_counted_twice(fixture_path):
    (a,) = by_id(read(fixture_path)[0])["100"]
    assert a.gpus == 4  # gres/gpu:h100=4,gres/gpu=4 -> 4, not 8
    assert a.gpu_types == (("h100", 4),)


def test_arrays_and_het_components_count_individually(fixture_path):
    jobs = by_id(read(fixture_path)[0])
    assert jobs["102_1"][0].job_id_raw == "103" and jobs["102_2"][0].job_id_raw == "104"
    assert jobs["110+0"][0].gpus == 1 and jobs["110+1"][0].gpus == 2


def test_no_gpu_job_counts_zero(fixture_path):
    (a,) = by_id(read(fixture_path)[0])["105"]
    assert a.gpus == 0 and a.gpu_seconds == 0 and a.seconds == 3600


def test_requeued_attempts_all_count(fixture_path):
    tries = by_id(read(fixture_path)[0])["106"]
    assert [t.state for t in tries] == ["REQUEUED", "COMPLETED"]
    assert sum(t.gpu_seconds for t in tries) == 2 * 1800 + 2 * 3600


def test_window_clipping(fixture_path):
    jobs = by_id(read(fixture_path)[0])
    (a107,) = jobs["107"]
    assert a107.start == time.mktime((2026, 11, 1, 0, 0, 0, 0, 0, -1))
    assert a107.raw_start < a107.start and a107.gpu_seconds == 2 * 3600
    (a108,) = jobs["108"]
    assert a108.end == time.mktime((2026, 12, 1, 0, 0, 0, 0, 0, -1)) and a108.gpu_seconds == 2 * 3600


def test_running_job_counts_up_to_min_of_now_and_until(fixture_path):
    (a,) = by_id(read(fixture_path)[0])["109"]
    assert a.running and a.end == time.mktime((2026, 12, 1, 0, 0, 0, 0, 0, -1)) and a.gpu_seconds == 8 * 7200
    # without an end to the window it runs up to now: 22:00 .. 01:30 = 3.5 h
    (b,) = by_id(read(fixture_path, window=resolve_window(default_unbounded=True))[0])["109"]
    assert b.end == now_epoch() and b.gpu_seconds == 8 * 3.5 * 3600


def test_cancelled_by_uid_is_cancelled(fixture_path):
    (a,) = by_id(read(fixture_path)[0])["115"]
    assert a.state == "CANCELLED"


def test_job_name_with_pipe_does_not_shift_fields(fixture_path):
    (a,) = by_id(read(fixture_path)[0])["100"]
    assert a.job_name == "train|v2" and a.user == "alice" and a.account == "research"


def test_a_narrower_window_clips_again(fixture_path):
    # 11-02 11:00 .. 11-03 10:30: half of 100 (4 GPUs x 1 h) and half of 101 (16 GPUs x 0.5 h)
    w = resolve_window(since="2026-11-02T11:00:00", until="2026-11-03T10:30:00")
    attempts, _ = read(fixture_path, window=w)
    assert sum(a.gpu_seconds for a in attempts) == 4 * 3600 + 16 * 1800


def test_unbounded_window_reads_the_whole_file(fixture_path):
    w = resolve_window(default_unbounded=True)
    attempts, _ = read(fixture_path, window=w)
    # 107 and 108 now count in full (4 h x 1 and 2 h x 2) and 109 runs to now (3.5 h x 8):
    # 62 - 2 - 2 - 16 + 4 + 4 + 28 = 78
    assert sum(a.gpu_seconds for a in attempts) / 3600 == pytest.approx(78.0)


def test_filters(fixture_path):
    attempts, stats = read(
        fixture_path, filters=sacct.Filters(users=frozenset({"bob"}), states=frozenset({"COMPLETED"}))
    )
    assert sorted(a.job_id for a in attempts) == ["101", "105", "106", "116"]
    assert stats.filtered_out > 0


def test_malformed_rows_are_counted_with_line_numbers(fixture_path):
    attempts, stats = read(fixture_path, "malformed.txt", window=resolve_window(default_unbounded=True))
    assert sum(a.gpu_seconds for a in attempts) / 3600 == pytest.approx(4.0)
    assert sorted(a.job_id for a in attempts) == ["200", "207", "209"]
    assert stats.malformed == 7
    assert stats.malformed_lines == [16, 17, 18, 19, 20, 21, 23]
    assert stats.malformed_reasons["garbage AllocTRES"] == 2
    assert stats.malformed_reasons["bad time"] == 1
    warning = stats.warning("x.txt")
    assert "16, 17, 18, 19, 20, 21, 23" in warning and "7 malformed" in warning


def test_malformed_line_list_is_capped():
    rows = ["1|1|COMPLETED"] * 50
    cols = ["JobID", "JobIDRaw", "State", "AllocTRES", "Start", "End"]
    attempts, stats = sacct.parse_rows(rows, cols, sep="|", window=resolve_window(default_unbounded=True))
    assert stats.malformed == 50 and len(stats.malformed_lines) == sacct.MAX_LISTED_LINES
    assert "and 30 more" in stats.warning("f")


def test_unit_separator_and_epoch_times(fixture_path):
    header = "\x1f".join(sacct.FIELDS)
    row = "\x1f".join(
        [
            "5",
            "5",
            "COMPLETED",
            "billing=1,gres/gpu:h100=2,gres/gpu=2,node=1",
            "1793620000",
            "1793620800",
            "1793624400",
            "3600",
            "alice",
            "research",
            "debug",
            "node1",
            "None",
            "name|with|pipes",
        ]
    )
    cols, sep, trailing = sacct.read_header(header)
    assert sep == "\x1f" and not trailing
    attempts, _ = sacct.parse_rows([row + "\n"], cols, sep=sep, window=resolve_window(default_unbounded=True))
    (a,) = attempts
    assert a.gpu_seconds == 2 * 3600 and a.job_name == "name|with|pipes" and a.submit == 1793620000


def test_parsable_with_trailing_separator(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text(
        "JobID|State|AllocTRES|Start|End|\n"
        "7|COMPLETED|gres/gpu=3|2026-11-10T10:00:00|2026-11-10T11:00:00|\n"
        "7.batch|COMPLETED|gres/gpu=3|2026-11-10T10:00:00|2026-11-10T11:00:00|\n"
    )
    attempts, stats, _ = sacct.read_sacct_file(str(f), window=resolve_window(default_unbounded=True))
    assert [a.gpu_seconds for a in attempts] == [3 * 3600] and stats.malformed == 0


def test_columns_in_another_order_without_free_text_last(tmp_path):
    f = tmp_path / "o.txt"
    f.write_text(
        "JobName|State|JobID|AllocTRES|Start|End|User\n"
        "a|b|COMPLETED|8|gres/gpu=1|2026-11-10T10:00:00|2026-11-10T10:30:00|carol\n"
        "x|COMPLETED|8.batch|gres/gpu=1|2026-11-10T10:00:00|2026-11-10T10:30:00|\n"
    )
    attempts, stats, _ = sacct.read_sacct_file(str(f), window=resolve_window(default_unbounded=True))
    (a,) = attempts
    assert a.name == "a|b" and a.user == "carol" and a.gpu_seconds == 1800 and stats.step_rows == 1


def test_missing_columns_name_the_command(tmp_path):
    f = tmp_path / "m.txt"
    f.write_text("JobID|State|Start|End\n1|COMPLETED|1|2\n")
    with pytest.raises(UsageError) as exc:
        sacct.read_sacct_file(str(f), window=resolve_window(default_unbounded=True))
    assert "AllocTRES" in str(exc.value) and "sacct -a -D -T" in str(exc.value)


def test_file_without_header_is_refused(tmp_path):
    f = tmp_path / "n.txt"
    f.write_text("1|1|COMPLETED|gres/gpu=1|1|2\n")
    with pytest.raises(UsageError, match="header"):
        sacct.read_sacct_file(str(f), window=resolve_window(default_unbounded=True))


def test_parse_time_forms():
    assert sacct.parse_time("1793620000") == 1793620000
    assert sacct.parse_time("Unknown") is None and sacct.parse_time("None") is None
    assert sacct.parse_time("2026-11-10T10:00:05") == time.mktime((2026, 11, 10, 10, 0, 5, 0, 0, -1))
    for bad in (
        "2026-11-10",
        "2026-13-01T00:00:00",
        "2026-11-10T10:61:00",
        "yesterday",
        "2026-11-10T1a:00:00",
    ):
        with pytest.raises(ValueError):
            sacct.parse_time(bad)


def test_iso_parsing_follows_local_time(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    sacct.clear_time_caches()
    # 2026-10-25 03:30 CET (after the DST change at 03:00 CEST -> 02:00 CET) = 02:30 UTC
    assert sacct.parse_time("2026-10-25T03:30:00") == 1792895400
    # 2026-07-01 12:00 CEST = 10:00 UTC
    assert sacct.parse_time("2026-07-01T12:00:00") == 1782900000


def test_build_query_always_has_D_T_S_E():
    w = resolve_window(**NOV)
    q = sacct.build_query(w, sacct.Filters(users=frozenset({"bob", "alice"}), states=frozenset({"FAILED"})))
    for flag in ("-a", "-D", "-T", "-S", "-E", "--parsable2", "--noheader"):
        assert flag in q.args
    assert q.args[q.args.index("-S") + 1] == "2026-11-01T00:00:00"
    assert q.args[q.args.index("-E") + 1] == "2026-12-01T00:00:00"
    assert q.args[q.args.index("-u") + 1] == "alice,bob"
    assert "-s" not in q.args  # state filtering happens client-side
    assert q.env == {"SLURM_TIME_FORMAT": "%s"}
    fmt = [a for a in q.args if a.startswith("--format=")][0]
    asked = {c.lower() for c in fmt.split("=", 1)[1].split(",")}
    assert not asked & sacct.FREE_TEXT_COLUMNS  # no free text: every line is one record
    assert "--delimiter=$'\\x1f'" in q.display("sacct")


# --------------------------------------------------------------------------- fuzzing

_FIELD = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=30
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_FIELD, min_size=0, max_size=18).map("|".join), max_size=20))
def test_fuzz_rows_never_raise(rows):
    """Arbitrary rows: the parser never raises, and every row is accounted for."""
    lines = [r + "\n" for r in rows]
    attempts, stats = sacct.parse_rows(
        lines, sacct.FIELDS, sep="|", window=resolve_window(default_unbounded=True)
    )
    nonblank = sum(1 for r in rows if r.strip())
    assert stats.rows == nonblank
    assert (
        len(attempts)
        + stats.malformed
        + stats.step_rows
        + stats.not_started
        + stats.outside_window
        + stats.filtered_out
        == nonblank
    )
    for a in attempts:
        assert a.end >= a.start and a.gpus >= 0


_TIMES = st.one_of(
    st.integers(0, 2**33).map(str),
    st.sampled_from(
        ["Unknown", "None", "", "2026-11-10T10:00:00", "2026-02-30T10:00:00", "2026-11-10T25:00:00"]
    ),
)
_TRES = st.one_of(
    st.sampled_from(
        [
            "",
            "gres/gpu=2",
            "gres/gpu:h100=2,gres/gpu=2",
            "gres/gpu=x",
            "cpu",
            "gres/gpumem=80G,gres/gpu=1",
            "gres/gpu=-1",
            "=3",
        ]
    ),
    st.text(max_size=20).filter(lambda s: "|" not in s and "\n" not in s),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["1", "2_3", "4+0", "5.batch", "6.0", ""]),
            st.sampled_from(["COMPLETED", "RUNNING", "CANCELLED by 0", "PENDING", "FAILED", ""]),
            _TRES,
            _TIMES,
            _TIMES,
            _TIMES,
            _FIELD,
        ),
        max_size=15,
    )
)
def test_fuzz_structured_rows(rows):
    """Well-formed shape, hostile values: still no exception, GPU-seconds consistent."""
    lines = []
    for jid, state, tres, sub, start, end, name in rows:
        lines.append(
            "|".join([jid, jid, state, tres, sub, start, end, "0", "u", "a", "p", "n1", "None", name]) + "\n"
        )
    w = Window(1_000_000_000, 2_000_000_000, "fuzz")
    attempts, stats = sacct.parse_rows(lines, sacct.FIELDS, sep="|", window=w, now=1_900_000_000)
    for a in attempts:
        assert w.start <= a.start <= a.end <= w.end
        assert "." not in a.job_id
    assert stats.step_rows == sum(1 for r in rows if "." in r[0])


def test_blank_and_separatorless_lines():
    cols = ["JobID", "State", "AllocTRES", "Start", "End"]
    lines = [
        "\n",
        "   \n",
        "no.separator.here\n",
        "1|COMPLETED|gres/gpu=1|1790000010|1790000020\n",
        "1.batch|COMPLETED|x|10|20\n",
    ]
    attempts, stats = sacct.parse_rows(
        lines, cols, sep="|", window=resolve_window(default_unbounded=True), first_line=5
    )
    assert [a.gpu_seconds for a in attempts] == [10]
    assert stats.rows == 3 and stats.step_rows == 1 and stats.malformed_lines == [7]


def test_gpu_memory_and_utilisation_tres_do_not_add_gpu_hours():
    """Slurm 23.02+ AllocTRES carries gres/gpumem and gres/gpuutil next to gres/gpu: 2 GPUs
    for 10 s are 20 GPU-seconds, whatever the memory and utilisation counts say."""
    cols = ["JobID", "State", "AllocTRES", "Start", "End"]
    t0 = 1_794_000_000  # 2026-11-06 (times before 2000 are flagged impossible)
    lines = [
        f"1|COMPLETED|cpu=8,gres/gpu=2,gres/gpumem=81920,gres/gpuutil=100,mem=64G,node=1|{t0}|{t0 + 10}\n",
        f"2|COMPLETED|gres/gpu:h100=1,gres/gpumem=40960,gres/gpuutil=7|{t0}|{t0 + 10}\n",
    ]
    attempts, stats = sacct.parse_rows(lines, cols, sep="|", window=resolve_window(default_unbounded=True))
    assert stats.malformed == 0
    assert [(a.gpus, a.gpu_types, a.gpu_seconds) for a in attempts] == [(2, (), 20), (1, (("h100", 1),), 10)]


def test_steps_skipped_when_jobid_is_not_the_first_column(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text(
        "State|JobID|AllocTRES|Start|End|JobName\n"
        "COMPLETED|8|gres/gpu=2|2026-11-10T10:00:00|2026-11-10T10:30:00|a|b\n"
        "COMPLETED|8.batch|gres/gpu=2|2026-11-10T10:00:00|2026-11-10T10:30:00|batch\n"
        "COMPLETED|8.0|gres/gpu=2|2026-11-10T10:00:00|2026-11-10T10:30:00|x\n"
    )
    attempts, stats, _ = sacct.read_sacct_file(str(f), window=resolve_window(default_unbounded=True))
    assert [a.gpu_seconds for a in attempts] == [3600] and stats.step_rows == 2
    assert attempts[0].job_name == "a|b"
