"""Atomic JSON writes: the target is whole or untouched, never half written."""

import json
import os
import stat

import pytest

from slurmkit.core.files import write_json_atomic


def test_writes_sorted_json_with_mode(tmp_path):
    path = tmp_path / "doc.json"
    write_json_atomic(str(path), {"b": 1, "a": [1, 2]}, fsync=True, mode=0o640)
    assert path.read_text() == '{"a":[1,2],"b":1}'
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    write_json_atomic(str(path), {"a": 2}, indent=1)
    assert json.loads(path.read_text()) == {"a": 2}
    assert os.listdir(tmp_path) == ["doc.json"]  # no temporary file left behind


def test_failed_write_keeps_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "doc.json"
    path.write_text('{"old":true}')
    with pytest.raises(TypeError):
        write_json_atomic(str(path), {"bad": object()})
    assert path.read_text() == '{"old":true}'
    assert os.listdir(tmp_path) == ["doc.json"]
