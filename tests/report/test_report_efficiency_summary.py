"""slurmkit.report.efficiency.from_summary worked by hand: per-GPU and aggregated node
summaries, clipping, idle GPUs, memory peaks and the notes. Written to kill the mutants
etc/dev/mutation.sh found surviving (docs/testing.md)."""

from __future__ import annotations

import pytest

from slurmkit.report.efficiency import JobEfficiency, from_summary


def summarise(gpus, elapsed, summary, idle_below=5.0):
    job = JobEfficiency(job_id="1", gpus=gpus, elapsed_s=elapsed)
    from_summary(job, summary, idle_below)
    return job


def test_aggregated_nodes():
    """Node a: 4 GPUs, 3 known, 2 touched, 1500 GPU-s busy; node b: 4 known, all touched,
    busy more than possible (clipped to 4 x 1000)."""
    job = summarise(
        8,
        1000.0,
        {
            "nodes": {
                "a": {"agg": 1, "n": 4, "known": 3, "touched": 2, "b": 1500.0, "m": 40000, "c": 80000},
                "b": {"agg": 1, "n": 4, "known": 4, "touched": 4, "b": 9999.0, "m": 70000, "c": 80000},
            }
        },
    )
    assert job.source == "slurmkit" and job.note == ""
    assert (job.gpus_known, job.gpus_touched, job.gpus_idle) == (7, 6, 1)
    assert job.used_gpu_s == 5500.0 and job.idle_gpu_s == 1000.0
    assert job.util_pct == pytest.approx(100 * 5500 / 7000)
    assert (job.peak_mem_mib, job.mem_capacity_mib) == (70000.0, 80000.0)
    assert job.per_gpu == []


def test_an_aggregated_node_without_numbers_counts_nothing_known():
    job = summarise(4, 100.0, {"nodes": {"a": {"agg": True, "n": 4, "m": 5}}})
    assert (job.gpus_known, job.gpus_touched, job.gpus_idle, job.util_pct) == (0, None, None, None)
    assert job.used_gpu_s == 0.0 and job.peak_mem_mib is None and job.note == ""


def test_per_gpu_readings_clipped_and_judged():
    job = summarise(
        3,
        100.0,
        {
            "nodes": {
                "n1": {
                    "gpus": {
                        "0": {"u": 50, "t": 50, "p": 2, "m": 100, "c": 1000},  # busy half the time at 50 %
                        "1": {"u": 120, "t": 500, "p": 0, "m": 900, "c": 1000},  # both clipped to 100
                        "2": {"u": -5, "t": 100, "p": 1},  # clipped to 0: idle
                    }
                }
            },
            "missing": [],
        },
        idle_below=10.0,
    )
    assert (job.gpus_known, job.gpus_touched, job.gpus_idle) == (3, 2, 1)
    assert job.used_gpu_s == 125.0 and job.idle_gpu_s == 100.0
    assert job.util_pct == pytest.approx(125 / 3)
    assert (job.peak_mem_mib, job.mem_capacity_mib) == (900.0, 1000.0)  # the fullest GPU, by ratio
    assert job.per_gpu == [
        {
            "node": "n1",
            "gpu": "0",
            "util_pct": 25.0,
            "peak_mem_mib": 100.0,
            "capacity_mib": 1000.0,
            "processes": 2,
        },
        {
            "node": "n1",
            "gpu": "1",
            "util_pct": 100.0,
            "peak_mem_mib": 900.0,
            "capacity_mib": 1000.0,
            "processes": 0,
        },
        {
            "node": "n1",
            "gpu": "2",
            "util_pct": 0.0,
            "peak_mem_mib": None,
            "capacity_mib": None,
            "processes": 1,
        },
    ]


def test_idle_threshold_is_strict():
    job = summarise(1, 100.0, {"nodes": {"n": {"gpus": {"0": {"u": 5.0, "t": 100}}}}}, idle_below=5.0)
    assert job.gpus_idle == 0
    job = summarise(1, 100.0, {"nodes": {"n": {"gpus": {"0": {"u": 4.99, "t": 100}}}}}, idle_below=5.0)
    assert job.gpus_idle == 1 and job.idle_gpu_s == 100.0


def test_notes_for_missing_nodes_and_gpus():
    one = {"n1": {"gpus": {"0": {"u": 10, "t": 100}}}}
    job = summarise(4, 100.0, {"nodes": one, "missing": ["n2", 3]})
    assert job.note == "no summary from n2,3" and job.gpus_known == 1 and job.util_pct == 10.0
    job = summarise(4, 100.0, {"nodes": one})
    assert job.note == "3 GPU(s) not in the summary"
    job = summarise(1, 100.0, {"nodes": {"n1": {"gpus": {"0": {"a": "disabled"}, "1": {"u": 1, "t": 1}}}}})
    assert job.note == "accounting disabled" and job.gpus_known == 1


def test_no_time_elapsed_gives_no_ratio():
    job = summarise(1, 0.0, {"nodes": {"n1": {"gpus": {"0": {"u": 10, "t": 100}}}}})
    assert job.util_pct is None and job.used_gpu_s == 0.0 and job.gpus_known == 1
    assert job.per_gpu[0]["util_pct"] == 0.0 and job.gpus_idle == 1 and job.idle_gpu_s == 0.0


def test_known_is_capped_by_the_allocation_unless_it_is_unknown():
    two = {"n1": {"gpus": {"0": {"u": 10, "t": 100}, "1": {"u": 30, "t": 100}}}, "n0": "junk"}
    job = summarise(0, 100.0, {"nodes": two})
    assert job.gpus_known == 2 and job.util_pct == 20.0 and job.used_gpu_s == 40.0
    job = summarise(1, 100.0, {"nodes": two})
    assert job.gpus_known == 1 and job.util_pct == 40.0


def test_an_aggregated_node_missing_its_counts_counts_zero_of_each():
    """No ``n``: no GPU seen (the note counts all four as missing); no ``touched``: none
    touched, so every known GPU is idle; no ``b``: nothing used."""
    job = summarise(4, 100.0, {"nodes": {"a": {"agg": 1, "known": 2}}})
    assert job.note == "4 GPU(s) not in the summary"
    assert (job.gpus_known, job.gpus_touched, job.gpus_idle) == (2, 0, 2)
    assert (job.used_gpu_s, job.idle_gpu_s, job.util_pct) == (0.0, 200.0, 0.0)


def test_a_gpu_entry_that_is_not_a_dict_is_skipped_not_the_rest():
    job = summarise(2, 100.0, {"nodes": {"n": {"gpus": {"0": "junk", "1": {"u": 40, "t": 100, "p": 1}}}}})
    assert job.gpus_known == 1 and job.util_pct == 40.0 and [g["gpu"] for g in job.per_gpu] == ["1"]
    assert job.note == "1 GPU(s) not in the summary"


def test_a_gpu_without_a_utilisation_says_so_in_the_note():
    job = summarise(1, 100.0, {"nodes": {"n": {"gpus": {"0": {"t": 100}}}}})
    assert job.note == "accounting gave no utilisation" and job.util_pct is None


def test_a_gpu_without_a_busy_time_used_nothing():
    job = summarise(1, 100.0, {"nodes": {"n": {"gpus": {"0": {"u": 80, "p": 1}}}}})
    assert (job.used_gpu_s, job.util_pct, job.gpus_idle) == (0.0, 0.0, 1)


def test_one_second_is_enough_time_for_a_ratio():
    job = summarise(1, 1.0, {"nodes": {"n": {"gpus": {"0": {"u": 50, "t": 1, "p": 1}}}}})
    assert (job.used_gpu_s, job.util_pct, job.gpus_idle) == (0.5, 50.0, 0)
    assert job.per_gpu[0]["util_pct"] == 50.0


def test_negative_busy_times_count_as_no_time():
    """A summary is the epilog's, but a corrupt one must not give a negative use
    (fixed with this test: a negative ``t`` or ``b`` was used as it was)."""
    job = summarise(1, 100.0, {"nodes": {"n": {"gpus": {"0": {"u": 80, "t": -50, "p": 1}}}}})
    assert (job.used_gpu_s, job.util_pct, job.gpus_idle) == (0.0, 0.0, 1)
    job = summarise(2, 100.0, {"nodes": {"a": {"agg": 1, "n": 2, "known": 2, "touched": 2, "b": -300.0}}})
    assert (job.used_gpu_s, job.util_pct) == (0.0, 0.0)


def test_a_memory_peak_needs_its_capacity():
    job = summarise(
        2,
        100.0,
        {"nodes": {"n": {"gpus": {"0": {"u": 10, "t": 100, "m": 500}, "1": {"u": 10, "t": 100, "c": 900}}}}},
    )
    assert (job.peak_mem_mib, job.mem_capacity_mib) == (None, None)
    assert job.per_gpu[0]["peak_mem_mib"] == 500.0 and job.per_gpu[0]["capacity_mib"] is None


def test_the_peak_is_the_largest_fraction_not_the_largest_number():
    gpus = {
        "0": {"u": 10, "t": 100, "m": 70000, "c": 80000},  # 87.5 %
        "1": {"u": 10, "t": 100, "m": 40000, "c": 40000},  # 100 %: the peak
        "2": {"u": 10, "t": 100, "m": 100, "c": 90000},  # the largest product with 0: not it
    }
    job = summarise(3, 100.0, {"nodes": {"n": {"gpus": gpus}}})
    assert (job.peak_mem_mib, job.mem_capacity_mib) == (40000.0, 40000.0)


def test_per_gpu_utilisation_is_rounded_to_two_decimals():
    job = summarise(1, 300.0, {"nodes": {"n": {"gpus": {"0": {"u": 100, "t": 100, "p": 1}}}}})
    assert job.per_gpu[0]["util_pct"] == 33.33 and job.util_pct == pytest.approx(100 / 3)


def test_notes_are_joined_sorted():
    job = summarise(
        3,
        100.0,
        {"nodes": {"n": {"gpus": {"0": {"a": "disabled"}, "1": {"u": 1, "t": 1}}}}, "missing": ["n9"]},
    )
    assert job.note == "accounting disabled; no summary from n9"
