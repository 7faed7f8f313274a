"""One exit code per meaning: the exception classes, docs/config.md's table and the
errors module's table agree, and no two meanings share a code."""

from __future__ import annotations

import re
from pathlib import Path

from slurmkit import errors
from slurmkit.cli import common

REPO = Path(__file__).resolve().parents[2]


def _documented(text: str) -> dict:
    return {int(code): meaning.strip() for code, meaning in re.findall(r"^\| (\d+) \| (.+?) \|$", text, re.M)}


def test_each_code_has_one_meaning_in_the_docs_and_in_the_code():
    table = _documented((REPO / "docs" / "config.md").read_text())
    assert sorted(table) == [0, 1, 2, 3, 4, 70, 124, 130]
    assert "devcluster" in table[4] and "--wait-timeout" in table[124]
    assert (
        "internal error" in table[common.INTERNAL_ERROR_EXIT] and "Ctrl-C" in table[common.INTERRUPTED_EXIT]
    )
    for code in (common.INTERNAL_ERROR_EXIT, common.INTERRUPTED_EXIT):
        assert re.search(rf"^{code}\s{{2,}}\S", errors.__doc__, re.M), f"errors.py's table lacks {code}"
    assert errors.DevclusterError.exit_code == 4 and errors.WaitTimeout.exit_code == 124
    leaf_classes = [
        errors.UsageError,
        errors.ExternalCommandError,
        errors.DevclusterError,
        errors.WaitTimeout,
    ]
    codes = [cls.exit_code for cls in leaf_classes]
    assert len(set(codes)) == len(codes) and set(codes) <= set(table)
    for code in codes:
        assert re.search(rf"^{code}\s{{2,}}\S", errors.__doc__, re.M), f"errors.py's table lacks {code}"


def test_ssubmit_documents_the_same_wait_timeout_code():
    table = _documented((REPO / "docs" / "ssubmit.md").read_text())
    assert "--wait-timeout" in table[errors.WaitTimeout.exit_code] and 4 not in table
