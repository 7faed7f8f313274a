"""Train the tiny byte-level GPT with DDP, checkpointing and requeue support.

    $ torchrun --standalone --nproc_per_node=2 train.py --steps 50
    $ SLURMKIT_CHECKPOINT_DIR=/scratch/ckpt torchrun ... train.py   # resumable

Runs on GPUs (NCCL) or, without CUDA, on CPUs (gloo) with the Triton kernel executed
by Triton's interpreter. It implements slurmkit's checkpoint/requeue contract, shared
with ``ssubmit`` (see docs/trainer.md):

* ``SLURMKIT_CHECKPOINT_DIR``: rank 0 writes ``latest.pt`` there atomically (temp file,
  then ``os.replace``) with model, optimizer, step and RNG state; at start every rank
  loads it if present and continues at the saved step.
* ``SLURMKIT_CHECKPOINT_EVERY`` (or ``--ckpt-every``): periodic saves every N steps.
* ``SLURMKIT_CHECKPOINT_NOW``: a file path. When it exists at a step boundary (on any
  rank: the ranks all-reduce a flag), rank 0 saves, all ranks meet at a barrier, rank 0
  removes the file, and the trainer exits 0 after printing
  ``slurmkit: checkpoint saved at step N (requested)``. SIGUSR2 or SIGTERM delivered to a
  trainer process raises the same flag.
* ``SLURMKIT_RESTART_COUNT``: printed at start.

Batches are a pure function of (seed, step, rank), so a resumed run sees exactly the
batches an uninterrupted run would have seen, and its weights end bitwise identical.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

if not torch.cuda.is_available():
    # Must happen before triton is first imported (by slurmkit_kernels via model):
    # Triton reads TRITON_INTERPRET once, at import time.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from model import GPT, GPTConfig  # noqa: E402  (after TRITON_INTERPRET)

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "corpus.txt"
CHECKPOINT_NAME = "latest.pt"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="total optimizer steps (default 200)")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--seq-len", type=int, default=64, help="context length in bytes")
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument(
        "--n-head", type=int, default=4, help="head_dim = n_embd / n_head must be 16, 32, 64 or 128"
    )
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate (constant)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument(
        "--step-sleep",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="sleep after each step (lets tests deliver a signal mid-run)",
    )
    p.add_argument(
        "--attention",
        choices=("flash", "sdpa"),
        default="flash",
        help="attention core: the slurmkit Triton kernel or torch SDPA",
    )
    p.add_argument(
        "--ckpt-every",
        type=int,
        default=None,
        metavar="STEPS",
        help="periodic checkpoint interval (default: $SLURMKIT_CHECKPOINT_EVERY, else off)",
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="text file, read as bytes")
    args = p.parse_args(argv)
    if args.ckpt_every is None:
        env = os.environ.get("SLURMKIT_CHECKPOINT_EVERY", "0") or "0"
        try:
            args.ckpt_every = int(env)
        except ValueError:
            p.error(f"SLURMKIT_CHECKPOINT_EVERY must be an integer, got {env!r}")
    for name in ("steps", "batch_size", "seq_len", "n_layer", "n_embd", "n_head"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.ckpt_every < 0:
        p.error("--ckpt-every must be >= 0")
    return args


class StopRequest:
    """Whether someone asked this job to checkpoint and stop.

    Sources: the SLURMKIT_CHECKPOINT_NOW file (touched by the batch script when Slurm
    signals it) and SIGUSR2/SIGTERM sent straight to this process. Only some ranks may
    see a signal, or see the file first, so :meth:`agreed` all-reduces the flag: every
    rank stops at the same step or none does.
    """

    def __init__(self, request_file: str | None):
        self.request_file = Path(request_file) if request_file else None
        self.signalled = False
        for sig in (signal.SIGUSR2, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        self.signalled = True

    def local(self) -> bool:
        return self.signalled or (self.request_file is not None and self.request_file.exists())

    def agreed(self, device: torch.device) -> bool:
        flag = torch.tensor([1.0 if self.local() else 0.0], device=device)
        if dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def get_batch(data: torch.Tensor, args: argparse.Namespace, step: int, rank: int, device: torch.device):
    """Random windows of the corpus, determined by (seed, step, rank) alone."""
    gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + rank)
    starts = torch.randint(0, len(data) - args.seq_len - 1, (args.batch_size,), generator=gen)
    x = torch.stack([data[s : s + args.seq_len] for s in starts])
    y = torch.stack([data[s + 1 : s + 1 + args.seq_len] for s in starts])
    return x.to(device), y.to(device)


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def save_checkpoint(ckpt_dir: Path, model, optimizer, step: int, args) -> None:
    """Rank 0 only. Write to a temp file and rename, so a kill mid-write never leaves a
    truncated latest.pt (os.replace is atomic within one filesystem)."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    tmp = ckpt_dir / f".{CHECKPOINT_NAME}.tmp"
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": step,
            "rng": rng_state(),
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        },
        tmp,
    )
    os.replace(tmp, ckpt_dir / CHECKPOINT_NAME)


def load_checkpoint(path: Path, model, optimizer, device: torch.device) -> int:
    """Resume from ``path``. ``weights_only=True``: a checkpoint holds tensors, numbers and
    strings only, so unpickling can never run code; and a file someone else owns, or
    may rewrite, is refused outright (shared checkpoint trees are often world-writable)."""
    st = path.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o022 or path.parent.stat().st_mode & 0o022:
        raise SystemExit(f"refusing to load {path}: not owned by this user, or writable by others")
    ckpt = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    if torch.cuda.is_available() and "cuda" in ckpt["rng"]:
        torch.cuda.set_rng_state_all(ckpt["rng"]["cuda"])
    return int(ckpt["step"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        use_cuda = torch.cuda.is_available()
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    else:
        use_cuda, rank, world, local_rank = torch.cuda.is_available(), 0, 1, 0
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    is_main = rank == 0

    def log(msg: str) -> None:
        if is_main:
            print(msg, flush=True)

    log(f"slurmkit: restart count {os.environ.get('SLURMKIT_RESTART_COUNT', '0')}")
    stop = StopRequest(os.environ.get("SLURMKIT_CHECKPOINT_NOW"))
    ckpt_dir_env = os.environ.get("SLURMKIT_CHECKPOINT_DIR")
    ckpt_dir = Path(ckpt_dir_env) if ckpt_dir_env else None

    data = torch.frombuffer(bytearray(args.data.read_bytes()), dtype=torch.uint8).long()
    if len(data) <= args.seq_len + 1:
        raise SystemExit(f"{args.data}: corpus ({len(data)} bytes) is shorter than --seq-len + 2")

    torch.manual_seed(args.seed)  # same initial weights on every rank
    config = GPTConfig(
        seq_len=args.seq_len,
        n_layer=args.n_layer,
        n_head=args.n_head,
        n_embd=args.n_embd,
        attention=args.attention,
    )
    model = GPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    log(
        f"model: {model.num_params()} parameters, attention={args.attention}, "
        f"world size {world}, device {device}"
    )

    step = 0
    if ckpt_dir is not None and (ckpt_dir / CHECKPOINT_NAME).exists():
        step = load_checkpoint(ckpt_dir / CHECKPOINT_NAME, model, optimizer, device)
        log(f"resumed from step {step}")
    # A request file that exists already is honoured at the first step boundary: the
    # launcher gives every run its own path (ssubmit: per job and restart count), so it
    # was sent to this run, e.g. while the model was still loading.
    if distributed:
        dist.barrier()

    ddp_model = torch.nn.parallel.DistributedDataParallel(model) if distributed else model

    def checkpoint() -> None:
        if ckpt_dir is not None and is_main:
            save_checkpoint(ckpt_dir, model, optimizer, step, args)

    requested = False
    while step < args.steps:
        x, y = get_batch(data, args, step, rank, device)
        _, loss = ddp_model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        loss_avg = loss.detach()
        if distributed:
            dist.all_reduce(loss_avg, op=dist.ReduceOp.SUM)
            loss_avg /= world
        log(f"step {step} loss {loss_avg.item():.4f}")
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if args.ckpt_every and step % args.ckpt_every == 0 and step < args.steps:
            checkpoint()
        if stop.agreed(device):
            requested = True
            break

    # On request, and after the last step (so a requeue after completion does not retrain).
    checkpoint()
    if distributed:
        dist.barrier()  # nobody exits before rank 0's checkpoint is in place
    if requested and is_main and stop.request_file is not None and stop.request_file.exists():
        stop.request_file.unlink()  # honoured; the next run must not stop again at once
    if not requested:
        log(f"done: {step} steps")
    elif ckpt_dir is None:
        log(f"slurmkit: stop requested at step {step} but SLURMKIT_CHECKPOINT_DIR is unset; nothing saved")
    else:
        log(f"slurmkit: checkpoint saved at step {step} (requested)")
    if distributed:
        # DDP's reducer keeps the process group (and gloo work objects) alive; drop it
        # before destroy_process_group, or a rank can abort at interpreter exit with
        # "terminate called without an active exception" (seen ~1 in 5 runs on gloo).
        del ddp_model
        gc.collect()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
