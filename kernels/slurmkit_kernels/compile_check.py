"""Compile the kernels exactly as the JIT launches them, for a GPU architecture, without a GPU.

    $ python -m slurmkit_kernels.compile_check --config h100 h200 --arch 90
    $ python -m slurmkit_kernels.compile_check --config tuned.json --dtypes bfloat16 --head-dims 128
    $ python -m slurmkit_kernels.compile_check --config h100 h200 --markdown-into docs/kernels.md

What is compiled is what a launch would compile, not a hand-written signature: the host
launch code of each kernel set (for the portable kernels, ``attention._forward`` and
``attention._backward``) runs on ``meta`` tensors with the benchmark's shapes
(``benchmarks/attention.py``: 16k tokens, ``H * D = 2048``, sequence 1k-16k, causal on and
off), every kernel launch is intercepted, and each is replayed through the kernel's own
``JITFunction.run(..., warmup=True)`` under a stand-in Triton driver that reports the
target architecture. Triton's binder therefore specialises the arguments as it does for a
real call (ints equal to 1 become constants, so a contiguous ``stride_d`` and MHA's
``GROUP`` fold away; ints and pointers divisible by 16 carry the divisibility attribute:
``meta`` tensors have address 0, as aligned as the CUDA caching allocator's blocks), and
launches with the same specialisation compile once, exactly as in the JIT's cache.

Per kernel, launch config, dtype and head dim it reports registers and spills (bytes
per thread, from ``ptxas -v`` run by Triton's own ``make_cubin``), shared memory (Triton's
metadata), and the number of ``wgmma`` (warpgroup MMA), ``cp.async.bulk.tensor`` (TMA) and
``setmaxnreg`` instructions in the PTX, with the register counts the ``setmaxnreg``
instructions set (a warp-specialised kernel's registers per thread group; ptxas's figure
is then the launch's ``maxnreg``). Exit code 1 on a compile error, **any spill**, shared
memory over the architecture's per-block limit (227 KB on sm_90), or a kernel set's
required instructions missing (:data:`REQUIRED_INSTRUCTIONS`: the Gluon forward and
backward must have ``setmaxnreg``, async wgmma and TMA); the table is printed either way. Exit code 2 under ``TRITON_INTERPRET=1`` (the interpreter does not compile) or for a
bad config file.

Registering more kernels (for example a Hopper path): write a function returning a
:class:`KernelSet`, a name and a ``launch(problem, config, arch)`` that runs the host
launch code on ``meta`` tensors (it may launch nothing for an arch it does not serve), and
add ``"module:function"`` to :data:`KERNEL_SETS`. Every ``@triton.jit`` launch made inside
``launch`` is recorded, whatever module makes it. Autotuned kernels must be pinned to one
config: the stand-in driver cannot time candidates.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

# Max shared memory per block (opt-in) by compute capability, CUDA programming guide.
SMEM_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448}
DTYPES = ("bfloat16", "float16", "float32")
HEAD_DIMS = (16, 32, 64, 128)
# The benchmark's sizing (benchmarks/attention.py, after the FlashAttention-3 paper).
BENCH_SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
BENCH_TOKENS = 16384
BENCH_HIDDEN = 2048
# "module:function" entries, each returning a KernelSet; see the module docstring.
KERNEL_SETS = [
    "slurmkit_kernels.compile_check:portable_kernel_set",
    "slurmkit_kernels.compile_check:hopper_kernel_set",
    "slurmkit_kernels.compile_check:varlen_kernel_set",
    "slurmkit_kernels.compile_check:gluon_kernel_set",
    "slurmkit_kernels.compile_check:gluon_bwd_kernel_set",
]
# Registered, checked only when named with ``--kernel-sets`` (kept out of the default sweep
# that CI requires to be clean); none at present.
OPTIONAL_KERNEL_SETS: list[str] = []
# Instructions a kernel set's kernels must contain, else the row fails: without them the
# warp-specialised forward would not be the kernel it claims to be.
REQUIRED_INSTRUCTIONS = {"gluon": ("setmaxnreg", "wgmma", "tma"), "gluon_bwd": ("setmaxnreg", "wgmma", "tma")}
MARK_BEGIN = "<!-- compile_check table: begin -->"
MARK_END = "<!-- compile_check table: end -->"


@dataclass(frozen=True)
class Problem:
    """One attention call: the host code derives every kernel argument from it."""

    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_k: int
    head_dim: int
    causal: bool
    dtype: str  # torch dtype name, e.g. "bfloat16"
    precision: str  # flash_attention's ``precision`` argument


@dataclass(frozen=True)
class KernelSet:
    """JIT kernels whose launches are compiled, and the host code that launches them."""

    name: str
    launch: Callable[[Problem, Any, int], None]  # (problem, KernelConfig, arch) -> None


@dataclass
class Row:
    """One distinct compiled kernel and what it costs (spills: stores/loads, bytes per thread)."""

    kernel_set: str
    kernel: str
    configs: list[str]
    dtype: str
    head_dim: int
    precision: str
    tiles: str
    num_warps: int
    num_stages: int
    regs: int = -1
    spill_stores: int = -1
    spill_loads: int = -1
    smem: int = -1
    wgmma: int = 0
    tma: int = 0
    # setmaxnreg instructions in the PTX and the register counts they set (warp-specialised
    # kernels: each thread group's registers; ptxas's ``regs`` is then the launch's maxnreg).
    setmaxnreg: int = 0
    setmaxnreg_values: tuple[int, ...] = ()
    seconds: float = 0.0
    launches: int = 0
    result: str = "ok"
    groups: set[int] = field(default_factory=set)  # query heads per KV head of the problems using it


def _meta_problem(problem: Problem, dtype):
    """``problem``'s q, k, v as meta tensors (shapes only: compiling launches nothing) and
    its band, as ``attention._forward`` takes them."""
    import torch

    from . import attention

    b, hq, hkv, nq, nk, d = (
        problem.batch,
        problem.heads_q,
        problem.heads_kv,
        problem.seq_q,
        problem.seq_k,
        problem.head_dim,
    )
    q = torch.empty((b, hq, nq, d), dtype=dtype, device="meta")
    k = torch.empty((b, hkv, nk, d), dtype=dtype, device="meta")
    v = torch.empty((b, hkv, nk, d), dtype=dtype, device="meta")
    return q, k, v, attention._band(problem.causal, None, nq, nk)


def portable_kernel_set() -> KernelSet:
    """The kernels of ``_kernels.py``, launched by ``attention._forward``/``_backward``."""
    from . import attention

    def launch(problem: Problem, config, arch: int) -> None:
        import torch

        dtype = getattr(torch, problem.dtype)
        q, k, v, band = _meta_problem(problem, dtype)
        d = problem.head_dim
        scale = 1.0 / math.sqrt(d)
        o, lse = attention._forward(q, k, v, band, scale, problem.precision, config)
        attention._backward(torch.empty_like(o), q, k, v, o, lse, band, scale, problem.precision, config)

    return KernelSet("portable", launch)


def hopper_kernel_set() -> KernelSet:
    """The Hopper path of ``_hopper.py`` (TMA, 5-matmul backward in both dQ modes); launches
    nothing below sm_90 or for fp32, which keep the portable kernels."""
    from . import hopper_check

    return KernelSet("hopper", hopper_check.hopper_problem_launch)


def varlen_kernel_set() -> KernelSet:
    """The variable-length kernels of ``_varlen.py`` (every dtype) with the shipped configs."""
    from . import hopper_check

    return KernelSet("varlen", hopper_check.varlen_problem_launch)


def gluon_kernel_set() -> KernelSet:
    """The warp-specialised Gluon forward of ``hopper_ws.py`` (opt-in, sm_90, fp16/bf16,
    head dim 128), launched by ``attention._forward(..., hopper=True, gluon=True)``; launches
    nothing for other archs, dtypes or head dims (which keep the Hopper forward)."""

    def launch(problem: Problem, config, arch: int) -> None:
        import torch

        from . import attention, hopper_ws

        dtype = getattr(torch, problem.dtype)
        if arch // 10 != 9 or dtype not in hopper_ws.DTYPES or problem.head_dim != hopper_ws.HEAD_DIM:
            return
        q, k, v, band = _meta_problem(problem, dtype)
        d = problem.head_dim
        attention._forward(q, k, v, band, d**-0.5, problem.precision, config, True, True)

    return KernelSet("gluon", launch)


def gluon_bwd_kernel_set() -> KernelSet:
    """The warp-specialised Gluon d128 backward of ``hopper_ws_bwd.py`` (compile-only: never
    run, not routed by ``flash_attention``), launched by ``hopper_ws_bwd.backward``; sm_90,
    fp16/bf16, head dim 128 only. dQ leaves by TMA reduce-add, counted in the TMA column."""

    def launch(problem: Problem, config, arch: int) -> None:
        import torch

        from . import hopper_ws_bwd

        dtype = getattr(torch, problem.dtype)
        if arch // 10 != 9 or dtype not in hopper_ws_bwd.DTYPES or problem.head_dim != hopper_ws_bwd.HEAD_DIM:
            return
        q, k, v, band = _meta_problem(problem, dtype)
        b, h, n, d = q.shape
        stats = torch.empty((b, h, n), dtype=torch.float32, device="meta")
        scale = d**-0.5
        hopper_ws_bwd.backward(
            q,
            k,
            v,
            torch.empty_like(q),
            stats,
            torch.empty_like(stats),
            torch.empty_like(q),
            torch.empty_like(k),
            torch.empty_like(v),
            band,
            scale,
            scale * math.log2(math.e),
        )

    return KernelSet("gluon_bwd", launch)


def load_kernel_sets(entries: Sequence[str] = KERNEL_SETS) -> list[KernelSet]:
    sets = []
    for entry in entries:
        module, _, func = entry.partition(":")
        sets.append(getattr(importlib.import_module(module), func)())
    return sets


def benchmark_problems(
    dtypes: Sequence[str],
    head_dims: Sequence[int],
    seq_lens: Sequence[int],
    gqa: int,
    precisions: dict[str, Sequence[str]],
) -> list[Problem]:
    """The benchmark's shapes for each dtype and head dim (plus GQA ``gqa``:1 if ``gqa > 1``)."""
    problems = []
    for dtype in dtypes:
        for precision in precisions.get(dtype, ("ieee",)):
            for d in head_dims:
                heads = max(1, BENCH_HIDDEN // d)
                groups = (1, gqa) if gqa > 1 and heads % gqa == 0 else (1,)
                for group in groups:
                    for n in seq_lens:
                        for causal in (False, True):
                            problems.append(
                                Problem(
                                    max(1, BENCH_TOKENS // n),
                                    heads,
                                    heads // group,
                                    n,
                                    n,
                                    d,
                                    causal,
                                    dtype,
                                    precision,
                                )
                            )
    return problems


@dataclass(frozen=True)
class Launch:
    fn: Any  # JITFunction
    args: tuple
    kwargs: dict


@contextlib.contextmanager
def capture_launches() -> Iterator[list[Launch]]:
    """Record instead of run every JIT kernel launch made inside the block.

    ``kernel[grid](...)`` (and an Autotuner's or Heuristics' inner call) ends in
    ``JITFunction.run``; the class method is swapped for a recorder and restored on exit,
    so host code needs no change and no launch escapes unrecorded.
    """
    from triton.runtime.jit import JITFunction

    launches: list[Launch] = []

    def recorder(self, *args, grid, warmup, **kwargs):
        launches.append(Launch(self, args, dict(kwargs)))

    original = JITFunction.run
    JITFunction.run = recorder
    try:
        yield launches
    finally:
        JITFunction.run = original


def _target_driver(target):
    """A Triton driver that only names a target: enough for ``run(..., warmup=True)``."""
    from triton.backends.driver import DriverBase

    class TargetDriver(DriverBase):
        device = f"compile_check:{target.backend}:{target.arch}"

        @classmethod
        def is_active(cls):
            return False

        def map_python_to_cpp_type(self, ty):
            raise NotImplementedError("compile_check never launches")

        def get_current_target(self):
            return target

        def get_active_torch_device(self):
            import torch

            return torch.device("meta")

        def get_benchmarker(self):
            raise NotImplementedError("compile_check cannot time kernels (no GPU)")

        def get_current_device(self):
            return self.device

        def get_current_stream(self, device=None):
            return 0

        @property
        def launcher_cls(self):
            raise RuntimeError("compile_check: a kernel was launched outside capture_launches()")

    return TargetDriver()


@contextlib.contextmanager
def target_driver(target) -> Iterator[Any]:
    from triton.runtime.driver import driver

    previous = driver._active  # no public getter that does not create the default driver
    stand_in = _target_driver(target)
    driver.set_active(stand_in)
    try:
        yield stand_in
    finally:
        driver._active = previous


_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


_SETMAXNREG = re.compile(r"^\s*setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", re.MULTILINE)


def setmaxnreg_values(ptx: str) -> tuple[int, ...]:
    """The distinct register counts that ``setmaxnreg.inc/dec`` instructions in ``ptx`` set."""
    return tuple(sorted({int(n) for n in _SETMAXNREG.findall(ptx)}))


def count_instructions(ptx: str, opcode: str) -> int:
    """Instructions in ``ptx`` whose opcode starts with ``opcode`` (e.g. ``"wgmma.mma_async"``).

    An instruction may carry a predicate guard, ``@%p1 cp.async.bulk.tensor...`` or
    ``@!%p2 ...``: Triton guards every TMA copy so one thread issues it, and a pattern
    anchored at the opcode alone counted 0 TMA instructions in every Hopper kernel.
    """
    pattern = r"^\s*(?:@!?%\w+\s+)?" + re.escape(opcode) + r"(?![\w])"
    return len(re.findall(pattern, ptx, re.MULTILINE))


def parse_ptxas_log(log: str) -> tuple[int, int, int]:
    """(registers, spill-store bytes, spill-load bytes) per thread from ``ptxas -v`` output."""
    regs, spills = _PTXAS_REGS.search(log), _PTXAS_SPILLS.search(log)
    if not regs or not spills:
        raise ValueError(f"no register/spill figures in the ptxas log: {log[-300:]!r}")
    return int(regs.group(1)), int(spills.group(1)), int(spills.group(2))


def verdict(row: Row, smem_limit: int) -> str:
    """ "ok", or what is wrong with a compiled kernel: any spill, too much shared memory, or
    an instruction its kernel set requires missing."""
    problems = []
    for name in REQUIRED_INSTRUCTIONS.get(row.kernel_set, ()):
        if not getattr(row, name):
            problems.append(f"NO {name.upper()}")
    if row.spill_stores or row.spill_loads:
        problems.append("SPILLS")
    if row.smem > smem_limit:
        problems.append(f"SMEM OVER {smem_limit}")
    return ", ".join(problems) or "ok"


def _ptxas_log(compiled, target, captured: str) -> str:
    """ptxas's ``-v`` report for ``compiled``: the one printed while compiling, or (kernel
    taken from Triton's on-disk cache) a re-run of Triton's own ``make_cubin`` on its PTX."""
    if _PTXAS_REGS.search(captured):
        return captured
    from triton import knobs
    from triton.compiler import make_backend

    buf = io.StringIO()
    with knobs.nvidia.scope(), contextlib.redirect_stdout(buf):
        knobs.nvidia.dump_ptxas_log = True
        make_backend(target).make_cubin(compiled.asm["ptx"], {}, compiled.metadata, target.arch)
    return buf.getvalue()


def compile_launch(launch: Launch, target) -> tuple[Any, str]:
    """Compile one recorded launch the way the JIT would; returns (CompiledKernel, ptxas log).

    Must run inside :func:`target_driver`. Identical specialisations hit the JIT's cache and
    return the same CompiledKernel object.
    """
    from triton import knobs

    buf = io.StringIO()
    with knobs.nvidia.scope(), contextlib.redirect_stdout(buf):
        knobs.nvidia.dump_ptxas_log = True
        compiled = launch.fn.run(*launch.args, grid=None, warmup=True, **launch.kwargs)
    return compiled, buf.getvalue()


def _tiles(kwargs: dict) -> str:
    blocks = [str(kwargs[k]) for k in sorted(kwargs) if k.startswith("BLOCK_")]
    return "x".join(blocks) or "-"


def check(
    kernel_sets: Sequence[KernelSet],
    configs: Sequence[Any],
    problems: Sequence[Problem],
    arch: int,
    progress: Callable[[str], None] | None = None,
    kernel_names: Sequence[str] | None = None,
) -> list[Row]:
    """Compile every distinct launch of ``problems`` under ``configs`` for ``arch``; one Row each.

    ``kernel_names`` (function names, e.g. ``_attn_fwd``) restricts what is compiled.
    """
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", arch, 32)
    limit = SMEM_LIMIT[arch]
    rows: dict[tuple, Row] = {}
    by_kernel: dict[int, Row] = {}
    used = set()
    with target_driver(target) as stand_in:
        try:
            for kset in kernel_sets:
                for config in configs:
                    for problem in problems:
                        with capture_launches() as launches:
                            kset.launch(problem, config, arch)
                        for launch in launches:
                            if kernel_names and launch.fn.fn.__name__ not in kernel_names:
                                continue
                            used.add(launch.fn)
                            _record(rows, by_kernel, kset, config, problem, launch, target, limit, progress)
        finally:
            for fn in used:  # the stand-in device's JIT cache would only confuse a later real launch
                fn.device_caches.pop(stand_in.device, None)
    return list(rows.values())


def _record(rows, by_kernel, kset, config, problem, launch, target, limit, progress) -> None:
    name = launch.fn.fn.__name__
    start = time.monotonic()
    try:
        compiled, captured = compile_launch(launch, target)
        error = None
    except Exception as e:  # noqa: BLE001 (report every failing kernel, not just the first)
        compiled, error = None, f"COMPILE ERROR: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}"
    if compiled is None:
        warps, stages = launch.kwargs.get("num_warps", -1), launch.kwargs.get("num_stages", -1)
        key = (
            kset.name,
            name,
            problem.dtype,
            problem.head_dim,
            problem.precision,
            _tiles(launch.kwargs),
            warps,
            stages,
        )
        row = rows.setdefault(
            key,
            Row(
                kset.name,
                name,
                [],
                problem.dtype,
                problem.head_dim,
                problem.precision,
                _tiles(launch.kwargs),
                warps,
                stages,
                result=error or "COMPILE ERROR",
            ),
        )
    elif id(compiled) in by_kernel:
        row = by_kernel[id(compiled)]
    else:
        meta = compiled.metadata
        row = Row(
            kset.name,
            name,
            [],
            problem.dtype,
            problem.head_dim,
            problem.precision,
            _tiles(launch.kwargs),
            meta.num_warps,
            meta.num_stages,
            smem=meta.shared,
        )
        ptx = compiled.asm["ptx"]
        row.wgmma = count_instructions(ptx, "wgmma.mma_async")
        # TMA loads and stores, and TMA reduce-adds (the Gluon backward's dQ).
        row.tma = count_instructions(ptx, "cp.async.bulk.tensor") + count_instructions(
            ptx, "cp.reduce.async.bulk.tensor"
        )
        row.setmaxnreg = count_instructions(ptx, "setmaxnreg")
        row.setmaxnreg_values = setmaxnreg_values(ptx)
        try:
            log = _ptxas_log(compiled, target, captured)
            row.regs, row.spill_stores, row.spill_loads = parse_ptxas_log(log)
        except Exception as e:  # noqa: BLE001
            row.result = f"NO PTXAS REPORT: {e}"
        if row.result == "ok":
            row.result = verdict(row, limit)
        row.seconds = time.monotonic() - start
        by_kernel[id(compiled)] = row
        rows[("compiled", id(compiled))] = row
        if progress:
            progress(format_row(row))
    if config.name not in row.configs:
        row.configs.append(config.name)
    row.launches += 1
    row.groups.add(problem.heads_q // problem.heads_kv)


HEADER = (
    "set",
    "kernel",
    "configs",
    "tiles",
    "warps",
    "stages",
    "dtype",
    "prec",
    "d",
    "group",
    "regs",
    "spill",
    "smem",
    "wgmma",
    "tma",
    "setmaxnreg",
    "s",
    "result",
)


def _cells(row: Row) -> tuple[str, ...]:
    return (
        row.kernel_set,
        row.kernel,
        ",".join(row.configs),
        row.tiles,
        str(row.num_warps),
        str(row.num_stages),
        row.dtype,
        row.precision if row.dtype == "float32" else "-",
        str(row.head_dim),
        _groups(row),
        str(row.regs),
        f"{row.spill_stores}/{row.spill_loads}",
        str(row.smem),
        str(row.wgmma),
        str(row.tma),
        _setmaxnreg(row),
        f"{row.seconds:.1f}",
        row.result,
    )


def _setmaxnreg(row: Row) -> str:
    """``count:values`` (e.g. ``12:24/120/240/256``), or ``0``; no spaces (table cells)."""
    if not row.setmaxnreg:
        return "0"
    return f"{row.setmaxnreg}:" + "/".join(str(n) for n in row.setmaxnreg_values)


def _groups(row: Row) -> str:
    """GQA group sizes sharing the kernel: 1 alone means only MHA launches compile to it."""
    return ",".join(str(g) for g in sorted(row.groups)) or "-"


def format_row(row: Row) -> str:
    return " ".join(_cells(row))


def format_table(rows: Sequence[Row]) -> str:
    lines = [HEADER, *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def format_markdown(rows: Sequence[Row], arch: int, command: str) -> str:
    import triton

    head = (
        "kernel",
        "configs",
        "tiles",
        "warps",
        "stages",
        "dtype",
        "d",
        "group",
        "regs",
        "spill st/ld (B)",
        "smem (B)",
        "wgmma",
        "TMA",
        "setmaxnreg",
        "result",
    )
    out = [
        f"Generated by `{command}` (triton {triton.__version__}, sm_{arch}, limit "
        f"{SMEM_LIMIT[arch]} B of shared memory per block).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        dtype = r.dtype if r.dtype != "float32" else f"float32 ({r.precision})"
        cells = (
            f"{r.kernel_set}/{r.kernel}",
            ", ".join(r.configs),
            r.tiles,
            str(r.num_warps),
            str(r.num_stages),
            dtype,
            str(r.head_dim),
            _groups(r),
            str(r.regs),
            f"{r.spill_stores}/{r.spill_loads}",
            str(r.smem),
            str(r.wgmma),
            str(r.tma),
            _setmaxnreg(r),
            r.result,
        )
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def replace_marked_section(path: str, text: str) -> None:
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    begin, end = doc.find(MARK_BEGIN), doc.find(MARK_END)
    if begin < 0 or end < begin:
        raise ValueError(f"{path}: markers {MARK_BEGIN!r} ... {MARK_END!r} not found")
    doc = doc[: begin + len(MARK_BEGIN)] + "\n" + text + doc[end:]
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m slurmkit_kernels.compile_check", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--config",
        nargs="+",
        default=["h100", "h200"],
        help="built-in config names or JSON files (default: h100 h200)",
    )
    p.add_argument("--arch", type=int, default=90, choices=sorted(SMEM_LIMIT), help="compute capability x10")
    p.add_argument("--head-dims", type=int, nargs="+", default=list(HEAD_DIMS))
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    p.add_argument(
        "--fp32-precisions",
        nargs="+",
        choices=("ieee", "tf32"),
        default=["ieee", "tf32"],
        help="precision values compiled for float32 (fp16/bf16 ignore it)",
    )
    p.add_argument("--seq-lens", type=int, nargs="+", default=list(BENCH_SEQ_LENS))
    p.add_argument(
        "--gqa",
        type=int,
        default=4,
        help="also compile GQA with this many query heads per KV head (1: MHA only)",
    )
    p.add_argument(
        "--kernel-sets",
        nargs="+",
        default=None,
        help="names of registered kernel sets to check (default: all)",
    )
    p.add_argument(
        "--kernels",
        nargs="+",
        default=None,
        help="compile only these kernels (function names, e.g. _attn_bwd_dkdv)",
    )
    p.add_argument(
        "--markdown-into",
        metavar="FILE",
        help=f"also write the table as markdown between {MARK_BEGIN!r} and {MARK_END!r} in FILE",
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("compile_check: unset TRITON_INTERPRET; the interpreter does not compile", file=sys.stderr)
        return 2
    from .config import builtin_config, builtin_config_names, load_config

    try:
        configs = [builtin_config(c) if c in builtin_config_names() else load_config(c) for c in args.config]
    except (OSError, ValueError) as e:
        print(f"compile_check: {e}", file=sys.stderr)
        return 2
    kernel_sets = load_kernel_sets(KERNEL_SETS + (OPTIONAL_KERNEL_SETS if args.kernel_sets else []))
    if args.kernel_sets:
        unknown = set(args.kernel_sets) - {k.name for k in kernel_sets}
        if unknown:
            print(
                f"compile_check: unknown kernel set(s) {sorted(unknown)}; registered: "
                f"{[k.name for k in kernel_sets]}",
                file=sys.stderr,
            )
            return 2
        kernel_sets = [k for k in kernel_sets if k.name in args.kernel_sets]
    problems = benchmark_problems(
        args.dtypes, args.head_dims, args.seq_lens, args.gqa, {"float32": args.fp32_precisions}
    )
    print(
        f"# configs {', '.join(c.name for c in configs)}; sm_{args.arch}; shared-memory limit "
        f"{SMEM_LIMIT[args.arch]} B; {len(problems)} problems (benchmark shapes); kernel sets "
        f"{', '.join(k.name for k in kernel_sets)}",
        flush=True,
    )
    rows = check(
        kernel_sets,
        configs,
        problems,
        args.arch,
        progress=lambda line: print(f"# compiled {line}", file=sys.stderr, flush=True),
        kernel_names=args.kernels,
    )
    print(format_table(rows))
    failures = [r for r in rows if r.result != "ok"]
    print(f"# {len(rows)} distinct kernels, {len(failures)} failure(s)")
    if args.markdown_into:
        given = argv if argv is not None else sys.argv[1:]
        command = "python -m slurmkit_kernels.compile_check " + " ".join(given)
        replace_marked_section(args.markdown_into, format_markdown(rows, args.arch, command))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
