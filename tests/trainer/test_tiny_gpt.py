"""End-to-end tests of the tiny GPT example under torchrun (2 CPU processes, gloo).

The attention runs through the Triton interpreter, so each test launches real
``torchrun --standalone --nproc_per_node=2`` jobs; four launches take about 1.5 minutes
on 2 cores. They check the checkpoint/requeue contract shared with ``ssubmit``:
the loss falls, a requested checkpoint (file or signal to a single rank) stops every
rank with exit code 0, and a resumed run continues at the saved step and ends with
weights bitwise identical to an uninterrupted run.

Nothing here imports triton in the pytest process (see tests/kernels/conftest.py).
"""

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "job_templates" / "examples" / "tiny_gpt" / "train.py"
RUN_TIMEOUT = 240
STEP_LINE = re.compile(r"^step (\d+) loss (\d+\.\d{4})$", re.M)


def trainer_env(tmp_path: Path, ckpt_dir: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMKIT_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO / "kernels"), env.get("PYTHONPATH", "")]),
        CUDA_VISIBLE_DEVICES="",  # always the CPU/gloo path, even on a GPU runner
        OMP_NUM_THREADS="1",
        TRITON_CACHE_DIR=str(tmp_path / "triton-cache"),
        SLURMKIT_CHECKPOINT_DIR=str(ckpt_dir),
    )
    env.update(extra)
    return env


def torchrun(*args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(TRAINER),
        *args,
    ]


def run(cmd: list[str], env: dict, on_line=None) -> tuple[int, str]:
    """Run to completion, calling ``on_line(line, proc)`` for each output line."""
    # Own session, so a hung run can be killed with its workers (the group id is ours).
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=TRAINER.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue = queue.Queue()

    def pump():
        for text in proc.stdout:
            lines.put(text)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    output = []
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"trainer did not finish within {RUN_TIMEOUT}s:\n" + "".join(output))
        if line is None:
            break
        output.append(line)
        if on_line is not None:
            on_line(line, proc)
    reader.join()
    return proc.wait(), "".join(output)


def losses(output: str) -> dict[int, str]:
    return {int(step): loss for step, loss in STEP_LINE.findall(output)}


def load(ckpt_dir: Path) -> dict:
    return torch.load(ckpt_dir / "latest.pt", map_location="cpu", weights_only=False)


def assert_bitwise_equal(a, b, where="state"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8)), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_bitwise_equal(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_bitwise_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_loss_falls_and_requested_checkpoint_resumes_bitwise(tmp_path):
    steps = "6"
    # A: uninterrupted reference run.
    ckpt_a = tmp_path / "a"
    rc, out_a = run(torchrun("--steps", steps), trainer_env(tmp_path, ckpt_a))
    assert rc == 0, out_a
    loss_a = losses(out_a)
    assert sorted(loss_a) == list(range(1, 7)), out_a
    assert float(loss_a[6]) < float(loss_a[1]) - 0.5, f"loss did not fall: {loss_a}"
    assert load(ckpt_a)["step"] == 6

    # B1: the batch script "touches" SLURMKIT_CHECKPOINT_NOW after step 2 is printed.
    ckpt_b = tmp_path / "b"
    request = tmp_path / "checkpoint-now"
    env_b = trainer_env(tmp_path, ckpt_b, SLURMKIT_CHECKPOINT_NOW=str(request))

    def touch_after_step_2(line, proc):
        if line.startswith("step 2 "):
            request.touch()

    rc, out_b1 = run(torchrun("--steps", steps, "--step-sleep", "2"), env_b, touch_after_step_2)
    assert rc == 0, out_b1
    saved = re.search(r"^slurmkit: checkpoint saved at step (\d+) \(requested\)$", out_b1, re.M)
    assert saved, out_b1
    stopped_at = int(saved.group(1))
    assert 2 <= stopped_at < 6, out_b1
    assert max(losses(out_b1)) == stopped_at
    assert load(ckpt_b)["step"] == stopped_at
    assert not request.exists(), "the trainer removes the request once it is honoured"

    # B2: the requeued job resumes at the saved step and finishes like run A, bit for bit.
    env_b["SLURMKIT_RESTART_COUNT"] = "1"
    rc, out_b2 = run(torchrun("--steps", steps), env_b)
    assert rc == 0, out_b2
    assert f"resumed from step {stopped_at}\n" in out_b2
    assert "slurmkit: restart count 1\n" in out_b2
    loss_b2 = losses(out_b2)
    assert sorted(loss_b2) == list(range(stopped_at + 1, 7)), out_b2
    assert all(loss_b2[s] == loss_a[s] for s in loss_b2), (loss_a, loss_b2)
    final_a, final_b = load(ckpt_a), load(ckpt_b)
    assert final_b["step"] == 6
    assert_bitwise_equal(final_a["model"], final_b["model"], "model")
    assert_bitwise_equal(final_a["optimizer"], final_b["optimizer"], "optimizer")


def worker_pids(agent_pid: int) -> dict[int, int]:
    """{rank: pid} of the trainer processes that torchrun started (Linux /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != agent_pid:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        for var in environ:
            if var.startswith(b"RANK="):
                found[int(var[5:])] = int(entry.name)
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_signal_to_one_rank_stops_all_ranks(tmp_path):
    """SIGUSR2 to rank 1 only: the ranks agree via all_reduce and all stop at one step."""
    ckpt = tmp_path / "c"
    sent = []

    def signal_rank_1(line, proc):
        if line.startswith("step 1 ") and not sent:
            pid = worker_pids(proc.pid).get(1)
            assert pid is not None, "could not find rank 1's process"
            os.kill(pid, signal.SIGUSR2)
            sent.append(pid)

    rc, out = run(
        torchrun("--steps", "50", "--step-sleep", "2", "--attention", "sdpa"),
        trainer_env(tmp_path, ckpt),
        signal_rank_1,
    )
    assert sent, out
    assert rc == 0, out
    saved = re.search(r"^slurmkit: checkpoint saved at step (\d+) \(requested\)$", out, re.M)
    assert saved, out
    assert int(saved.group(1)) < 50
    assert load(ckpt)["step"] == int(saved.group(1))
