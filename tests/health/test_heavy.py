"""Heavy checks: the NVLink matrix judgement on fixture matrices, and real
GEMM / copy / all_reduce measurements on CPU tensors."""

from __future__ import annotations

import math

import pytest

from slurmkit.health.catalog import CATALOG
from slurmkit.health.checks import heavy
from slurmkit.health.engine import run_one
from slurmkit.verdict.base import Status


def full(n, value):
    return [[0.0 if i == j else value for j in range(n)] for i in range(n)]


def test_healthy_matrix_passes():
    m = full(8, 390.0)
    m[2][5] = 370.0  # ordinary spread
    r = heavy.judge_nvlink_matrix(m, floor_gbps=335, outlier_fraction=0.7)
    assert r.status == Status.OK and r.value == 370.0


def test_pair_below_floor_fails():
    m = full(8, 390.0)
    m[1][6] = 120.0
    r = heavy.judge_nvlink_matrix(m, 335, 0.7)
    assert r.code == "NVLINK_BW_FLOOR" and "1->6 120" in r.reason


def test_weak_link_above_floor_is_an_outlier():
    m = full(8, 600.0)  # a B100-like matrix with a low global floor
    m[3][4] = 380.0  # above a 335 floor, but 63 % of its row and column median
    r = heavy.judge_nvlink_matrix(m, 335, 0.7)
    assert r.code == "NVLINK_BW_OUTLIER" and "3->4" in r.reason and "4->3" not in r.reason


def test_a_whole_slow_gpu_is_caught_by_the_column_medians():
    m = full(8, 390.0)
    for k in range(8):
        if k != 5:
            m[5][k] = m[k][5] = 200.0  # GPU 5's row median drops, its peers' do not
    r = heavy.judge_nvlink_matrix(m, floor_gbps=0, outlier_fraction=0.7)
    assert r.code == "NVLINK_BW_OUTLIER"
    assert all(
        ("5->" in part or "->5" in part) for part in r.reason.split(": ", 1)[1].split(", ") if "->" in part
    )


def test_simulated_matrix_from_fixture(gpu_fixture, ctx_factory):
    gpu_fixture(lambda d: d.update(nvlink_bandwidth_gbps={"default": 390.0, "pairs": {"0-7": 150.0}}))
    r = run_one(ctx_factory(), CATALOG["nvlink_bandwidth"], 30)
    assert r.code == "NVLINK_BW_FLOOR" and r.details["matrix"][7][0] == 150.0
    gpu_fixture(lambda d: d.update(nvlink_bandwidth_gbps={"default": 390.0, "gpu_factor": {"2": 0.7}}))
    m = heavy.nvlink_matrix(ctx_factory())
    assert m[2][3] == pytest.approx(273.0) and m[3][2] == pytest.approx(273.0) and m[0][1] == 390.0


def test_allreduce_judgement():
    ok = heavy.judge_allreduce({"busbw_gbps": 470.0, "ranks": 8}, 480.0, 0.9)
    low = heavy.judge_allreduce({"busbw_gbps": 400.0, "ranks": 8}, 480.0, 0.9)
    wrong = heavy.judge_allreduce({"busbw_gbps": 470.0, "ranks": 8, "wrong": 3}, 480.0, 0.9)
    assert (ok.status, low.code, wrong.code) == (Status.OK, "ALLREDUCE_BUSBW_LOW", "ALLREDUCE_WRONG")


def test_per_device_judgement():
    vals = {f"gpu{i}": 710.0 for i in range(8)}
    assert (
        heavy.judge_per_device("gemm_tflops", vals, 550, 0.1, "TFLOP/s", "LOW", "SPREAD").status == Status.OK
    )
    vals["gpu3"] = 600.0  # above the floor, 15 % below the best
    r = heavy.judge_per_device("gemm_tflops", vals, 550, 0.1, "TFLOP/s", "LOW", "SPREAD")
    assert r.code == "SPREAD" and "gpu3" in r.reason
    vals["gpu3"] = 500.0
    assert heavy.judge_per_device("gemm_tflops", vals, 550, 0.1, "TFLOP/s", "LOW", "SPREAD").code == "LOW"


def test_gemm_and_copy_measure_on_cpu_tensors():
    pytest.importorskip("torch")
    tflops = heavy.gemm_tflops("cpu", size=128, iterations=3)
    gbps = heavy.hbm_bandwidth("cpu", size_mb=8, iterations=3)
    assert math.isfinite(tflops) and tflops > 0
    assert math.isfinite(gbps) and gbps > 0


def test_heavy_checks_on_cpu_when_no_gpu(ctx_factory):
    pytest.importorskip("torch")
    ctx = ctx_factory(
        health={
            "backend": "nvml",
            "checks": {
                "gemm_tflops": {"cpu_size": 128, "iterations": 2},
                "hbm_bandwidth": {"cpu_size_mb": 8, "iterations": 2},
            },
        }
    )
    g = run_one(ctx, CATALOG["gemm_tflops"], 120)
    h = run_one(ctx, CATALOG["hbm_bandwidth"], 120)
    assert g.status == Status.OK and list(g.details["per_device"]) == ["cpu"]
    assert h.status == Status.OK and h.value > 0
    nv = run_one(ctx, CATALOG["nvlink_bandwidth"], 120)
    assert nv.status == Status.UNKNOWN and nv.code == "NO_CUDA"


def test_allreduce_over_gloo_is_correct_and_measured():
    pytest.importorskip("torch")
    res = heavy.allreduce_busbw(None, ranks=2, backend="gloo", cpu_size_mb=1, iterations=2, timeout=120)
    assert res["wrong"] == 0 and res["ranks"] == 2 and res["busbw_gbps"] > 0


def test_a_hung_heavy_probe_fails_at_its_deadline(ctx_factory, monkeypatch):
    import time

    monkeypatch.setattr(heavy, "gemm_tflops", lambda *a, **k: time.sleep(30))
    ctx = ctx_factory(health={"backend": "nvml"})
    t0 = time.monotonic()
    r = run_one(ctx, CATALOG["gemm_tflops"], 0.5)
    assert time.monotonic() - t0 < 5
    assert r.status == Status.FAIL and r.code == "CHECK_TIMEOUT" and "gemm_tflops" in r.reason
