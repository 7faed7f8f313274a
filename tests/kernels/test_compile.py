"""Ahead-of-time compilation for sm_90 of what the JIT would launch (no GPU needed).

The interpreter never runs Triton's compiler, so register spills, shared-memory overflow
and code that only breaks when compiled would pass every other CPU test. These tests run
``python -m slurmkit_kernels.compile_check`` (full compile to a cubin with the ptxas
bundled in the triton wheel) in a subprocess, because this test process has
TRITON_INTERPRET=1 set.

* ``test_shipped_configs_compile_without_spills``: the shipped Hopper configs (h100 and
  h200, which compile to the same kernels) for bf16 at d64 and d128 (the largest tiles and
  the entries changed to remove spills), MHA and GQA, plus fp32 (IEEE and TF32) at d128:
  22 distinct kernels, about 2 minutes on 2 busy cores.
* ``test_full_sweep`` (marked ``compile_sweep``; part of ``tests/run.sh``, deselect with
  ``-m "not compile_sweep"``): every dtype, head dim and fp32 precision of h100/h200 on
  sm_90, MHA and GQA (108 kernels), reusing the cubins of the test above: ~8 minutes on
  2 busy cores.
* a known-spilling config is reported and fails the tool, and the launch arguments are
  specialised as the JIT specialises them (checked without compiling).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS_SRC = Path(__file__).resolve().parents[2] / "kernels"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One Triton cache for the module: the full sweep reuses the CI subset's cubins (a cache
    hit re-runs only ptxas, for its register report)."""
    return tmp_path_factory.mktemp("triton-cache")


def run_compile_check(args, cache, timeout):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(KERNELS_SRC), env.get("PYTHONPATH", "")])
    env["TRITON_CACHE_DIR"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "slurmkit_kernels.compile_check", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def table_rows(stdout: str) -> list[dict]:
    lines = [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#")]
    header, body = lines[0], lines[1:]
    # "result" may contain spaces ("SMEM OVER ..."): join the tail.
    last = len(header) - 1
    return [dict(zip(header, cells[:last] + [" ".join(cells[last:])])) for cells in body]


@pytest.mark.timeout(3000)
def test_shipped_configs_compile_without_spills(cache_dir):
    proc = run_compile_check(
        "--config h100 h200 --dtypes bfloat16 --head-dims 64 128 --seq-lens 4096".split(),
        cache_dir,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = table_rows(proc.stdout)
    assert {r["d"] for r in rows} == {"64", "128"}
    assert all(r["result"] == "ok" and r["spill"] == "0/0" for r in rows), proc.stdout
    assert all(r["configs"] == "h100,h200" for r in rows), proc.stdout
    # Hopper tensor-core code: every matmul kernel issues wgmma.
    assert all(int(r["wgmma"]) > 0 for r in rows if r["kernel"] != "_attn_bwd_preprocess"), proc.stdout
    # GQA (group 4) compiles separately from MHA (group 1 is a constant) and is checked too.
    assert any(r["group"] == "4" for r in rows if r["kernel"] == "_attn_bwd_dkdv"), proc.stdout

    proc = run_compile_check(
        "--config h100 h200 --dtypes float32 --head-dims 128 --seq-lens 4096 --gqa 1".split(),
        cache_dir,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = table_rows(proc.stdout)
    assert {r["prec"] for r in rows if r["kernel"] == "_attn_fwd"} == {"ieee", "tf32"}


@pytest.mark.compile_sweep
@pytest.mark.timeout(3600)
def test_full_sweep(cache_dir):
    """Every dtype, head dim, fp32 precision, MHA and GQA 4:1 of h100/h200 (the docs table)."""
    proc = run_compile_check(["--seq-lens", "4096"], cache_dir, timeout=3000)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(900)
def test_gqa_loop_keeps_the_register_count_of_mha(cache_dir):
    """The dK/dV kernels loop over the query heads of a GQA group around three software-
    pipelined query loops. Hoisting their loop-invariant prologue values out of the group
    loop (LICM) kept them live across it: bf16 d16 GQA took 197 registers against MHA's
    117 under triton 3.7.1 (254 under 3.6.0, and the varlen kernel spilled 136 bytes per
    thread at every head dim). The group loop now disables LICM; GQA must cost about what
    MHA does."""
    proc = run_compile_check(
        "--kernel-sets portable varlen --kernels _attn_bwd_dkdv _varlen_bwd_dkdv --config h100 --dtypes bfloat16 --head-dims 16 --seq-lens 4096".split(),
        cache_dir,
        timeout=800,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = table_rows(proc.stdout)
    for kernel in ("_attn_bwd_dkdv", "_varlen_bwd_dkdv"):
        regs = {r["group"]: int(r["regs"]) for r in rows if r["kernel"] == kernel}
        assert set(regs) == {"1", "4"}, proc.stdout
        assert regs["4"] <= regs["1"] + 32, proc.stdout


@pytest.mark.timeout(900)
def test_fp32_ieee_d16_forward_is_spill_free(cache_dir):
    """The fp32 IEEE d16 forward, dense and varlen (one shared body), causal and not, MHA
    and GQA. With one stage the non-causal varlen build spilled 4 B per thread under triton
    3.6.0 (56 registers; clean under 3.7.1), so the shipped configs give it 2 stages."""
    proc = run_compile_check(
        "--kernel-sets portable varlen --kernels _attn_fwd _varlen_fwd --dtypes float32 --fp32-precisions ieee --head-dims 16 --seq-lens 4096".split(),
        cache_dir,
        timeout=800,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = table_rows(proc.stdout)
    assert {r["kernel"] for r in rows} == {"_attn_fwd", "_varlen_fwd"}, proc.stdout
    # Non-causal and causal varlen builds are distinct kernels (CAUSAL is a constexpr).
    assert sum(r["kernel"] == "_varlen_fwd" and r["group"] == "1" for r in rows) == 2, proc.stdout
    assert all(r["spill"] == "0/0" and r["result"] == "ok" for r in rows), proc.stdout


def test_spilling_config_fails_the_check(tmp_path, cache_dir):
    """The d64 dK/dV tile 32x128 with 4 warps (shipped before) spills on sm_90; 8 warps do not."""
    import json

    from slurmkit_kernels.config import builtin_config

    data = builtin_config("h100").to_dict()
    data["name"] = "spills"
    data["kernels"]["bwd_dkdv"]["64"] = {"BLOCK_M": 32, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3}
    path = tmp_path / "spills.json"
    path.write_text(json.dumps(data))
    proc = run_compile_check(
        [
            "--config",
            str(path),
            "--dtypes",
            "bfloat16",
            "--head-dims",
            "64",
            "--seq-lens",
            "4096",
            "--gqa",
            "1",
        ],
        cache_dir,
        timeout=900,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {r["kernel"]: r for r in table_rows(proc.stdout)}
    assert rows["_attn_bwd_dkdv"]["result"] == "SPILLS", proc.stdout
    assert rows["_attn_bwd_dkdv"]["spill"] != "0/0"
    assert rows["_attn_fwd"]["result"] == "ok"


def test_launches_are_specialised_like_the_jit(tmp_path):
    """compile_check hands Triton the arguments of a real launch: stride_d == 1 and MHA's
    GROUP == 1 become constants, pointers and 16-divisible ints carry divisibility 16.
    Checked through Triton's jit_cache_hook, which sees the specialisation and skips the compile."""
    script = r"""
import json, sys
from triton import knobs
from triton.backends.compiler import GPUTarget
from slurmkit_kernels import compile_check as cc
from slurmkit_kernels.config import builtin_config
seen = {}
def hook(*args, **kwargs):
    fn, constexprs, attrs = kwargs["fn"], kwargs["compile"]["constants"], kwargs["compile"]["configs"][0]
    names = fn.jit_function.arg_names
    seen[fn.name] = {"constants": {names[k[0]]: str(v) for k, v in constexprs.items()},
                     "divisible": sorted(names[k[0]] for k, v in attrs.items()
                                         if ["tt.divisibility", 16] in [list(x) for x in v])}
    return True
knobs.runtime.jit_cache_hook = hook
kset = cc.portable_kernel_set()
problem = cc.Problem(4, 16, 16, 4096, 4096, 128, True, "bfloat16", "ieee")
target = GPUTarget("cuda", 90, 32)
with cc.target_driver(target):
    with cc.capture_launches() as launches:
        kset.launch(problem, builtin_config("h100"), 90)
    for launch in launches:
        cc.compile_launch(launch, target)
print(json.dumps(seen))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(KERNELS_SRC), env.get("PYTHONPATH", "")])
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    seen = json.loads(proc.stdout.splitlines()[-1])
    assert set(seen) == {"_attn_fwd", "_attn_bwd_preprocess", "_attn_bwd_dkdv", "_attn_bwd_dq"}
    fwd = seen["_attn_fwd"]
    assert fwd["constants"]["stride_qd"] == "1" and fwd["constants"]["GROUP"] == "1"
    assert fwd["constants"]["HEAD_DIM"] == "128" and fwd["constants"]["EMULATE_BF16"] == "False"
    assert {"Q", "K", "V", "O", "LSE", "stride_qm", "N_Q", "N_K"} <= set(fwd["divisible"])
    dkdv = seen["_attn_bwd_dkdv"]
    assert dkdv["constants"]["stride_dkd"] == "1" and dkdv["constants"]["GROUP"] == "1"


def test_instruction_counts_allow_a_predicate_guard():
    """Triton guards each TMA copy with a predicate (one thread issues it); the counter must
    see ``@%p1 cp.async.bulk.tensor`` as a TMA instruction, not only an unguarded one."""
    from slurmkit_kernels.compile_check import count_instructions

    ptx = "\n".join(
        [
            "\t// begin inline asm",
            "\t@%p1 cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2, {%r3, %r4, %r5, %r6}], [%r7];",
            "\t@!%p12 cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%rd9, {%r3, %r4, %r5, %r6}], [%r8];",
            "\tcp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2, {%r3, %r4}], [%r7];",
            "\tcp.async.bulk.commit_group;",  # not a tensor copy
            "\t// cp.async.bulk.tensor in a comment does not count",
            "\twgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%f1}, %rd1, %rd2, 1, 1, 1, 0, 1;",
            "\t@%p3 wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%f1}, %rd1, %rd2, 1, 1, 1, 0, 1;",
            "\twgmma.fence.sync.aligned;",
            "\t@%p2 atom.global.gpu.release.add.u32 %r9, [%rd3], 1;",
            "\tsetmaxnreg.inc.sync.aligned.u32 240;",
        ]
    )
    assert count_instructions(ptx, "cp.async.bulk.tensor") == 3
    assert count_instructions(ptx, "wgmma.mma_async") == 2
    assert count_instructions(ptx, "atom.global.gpu.release.add") == 1
    assert count_instructions(ptx, "setmaxnreg") == 1
    assert count_instructions(ptx, "cp.async.bulk") == 4


@pytest.mark.timeout(1200)
def test_hopper_kernels_report_their_tma_instructions(cache_dir):
    """On a real compiled Hopper kernel's PTX (bf16 d64, sm_90): every Hopper kernel that
    moves tiles through descriptors reports TMA instructions; the pointer-based portable
    preprocess kernel the backward also launches reports none."""
    proc = run_compile_check(
        "--kernel-sets hopper --config h100 --dtypes bfloat16 --head-dims 64 --seq-lens 4096 --gqa 1".split(),
        cache_dir,
        timeout=1100,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = table_rows(proc.stdout)
    hopper = [r for r in rows if r["kernel"] in ("_hopper_fwd", "_hopper_bwd")]
    assert len(hopper) >= 3, proc.stdout  # forward (+ longest-first), both backward modes
    assert all(int(r["tma"]) > 0 and int(r["wgmma"]) > 0 for r in hopper), proc.stdout
    assert all(r["tma"] == "0" for r in rows if r["kernel"] == "_attn_bwd_preprocess"), proc.stdout


DOCS = Path(__file__).resolve().parents[2] / "docs" / "kernels.md"


def _marked_table(text: str) -> list[str]:
    from slurmkit_kernels.compile_check import MARK_BEGIN, MARK_END

    section = text[text.index(MARK_BEGIN) : text.index(MARK_END)]
    return [
        line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| kernel |")
    ]


@pytest.mark.timeout(1800)
def test_docs_table_is_the_tools_output_for_every_kernel_set(tmp_path, cache_dir):
    """docs/kernels.md's compile table lists every registered kernel set, and its rows are
    what the tool prints now: the bf16 d64 slice is regenerated (every kernel set, MHA and
    GQA 4:1) and must match the docs row for row, so a kernel or config change that alters
    what compiles fails here until the table is regenerated."""
    from slurmkit_kernels import compile_check

    docs_rows = _marked_table(DOCS.read_text(encoding="utf-8"))
    names = {entry.rsplit(":", 1)[1].removesuffix("_kernel_set") for entry in compile_check.KERNEL_SETS}
    assert names == {"portable", "hopper", "varlen", "gluon", "gluon_bwd"}
    listed = {row.split(" | ")[0].removeprefix("| ").split("/")[0] for row in docs_rows}
    assert listed == names, f"docs/kernels.md lists kernel sets {sorted(listed)}, registered {sorted(names)}"
    assert "python -m slurmkit_kernels.compile_check --markdown-into docs/kernels.md" in DOCS.read_text()

    out = tmp_path / "table.md"
    out.write_text(f"{compile_check.MARK_BEGIN}\n{compile_check.MARK_END}\n")
    proc = run_compile_check(
        ["--dtypes", "bfloat16", "--head-dims", "64", "--seq-lens", "4096", "--markdown-into", str(out)],
        cache_dir,
        timeout=1700,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fresh = _marked_table(out.read_text())
    # The Gluon forward and backward serve head dim 128 only: test_gluon.py compares their d128 rows.
    assert {row.split(" | ")[0].removeprefix("| ").split("/")[0] for row in fresh} == names - {
        "gluon",
        "gluon_bwd",
    }
    docs_slice = [row for row in docs_rows if " | bfloat16 | 64 | " in row]
    assert sorted(docs_slice) == sorted(fresh), "\n".join(["docs:", *docs_slice, "tool:", *fresh])
