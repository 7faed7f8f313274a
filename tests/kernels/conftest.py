"""Kernel tests run the Triton kernels on the CPU through Triton's interpreter.

TRITON_INTERPRET=1 only takes effect if it is set before triton is first imported, so
it is set here, at the top of the first module pytest imports for this folder. Other
test folders must not import triton at module level, or collection order could import
it first; the check below turns that mistake into a clear error instead of confusing
"0 active drivers" failures.

Set SLURMKIT_TEST_DEVICE=cuda to run the same tests compiled on a GPU instead.
"""

import os
import sys
from pathlib import Path

import pytest

DEVICE = os.environ.get("SLURMKIT_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            "triton was imported before tests/kernels/conftest.py could set TRITON_INTERPRET=1; "
            "find the earlier import (another conftest or test module) and make it lazy"
        )
    os.environ["TRITON_INTERPRET"] = "1"

# Test the source tree even without `pip install -e kernels/`.
_KERNELS_SRC = Path(__file__).resolve().parents[2] / "kernels"
if str(_KERNELS_SRC) not in sys.path:
    sys.path.insert(0, str(_KERNELS_SRC))


@pytest.fixture
def device() -> str:
    return DEVICE
