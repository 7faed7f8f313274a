"""Atomic JSON writes: the target is whole or untouched, never half written."""

import json
import os
import stat
import threading

import pytest

from slurmkit.core.files import write_bytes_atomic, write_json_atomic


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


# --------------------------------------------------------------- links planted by another account


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path):
    """A link at the target is swapped for the new file: the file it pointed to keeps its
    content and its mode (a root-only file became 0644 through ``chmod(path)`` once)."""
    from slurmkit.metrics import Sample, write_textfile

    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    os.chmod(secret, 0o600)
    for i, write in enumerate(
        (
            lambda p: write_bytes_atomic(p, b"x", mode=0o644),
            lambda p: write_json_atomic(p, {"a": 1}, mode=0o644),
            lambda p: write_textfile(p, [Sample("slurmkit_x", "doc", {}, 1)]),
        )
    ):
        target = tmp_path / f"target{i}.prom"
        target.symlink_to(secret)
        write(str(target))
        assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
        assert secret.read_text() == "root only\n"
        assert not target.is_symlink() and stat.S_IMODE(os.lstat(target).st_mode) == 0o644


def test_a_symlink_swapped_in_right_after_the_rename_is_not_chmodded_through(tmp_path, monkeypatch):
    """The race a user in the directory can win: the link appears at the target between the
    rename and anything done by path afterwards (the old ``chmod(path)``)."""
    from slurmkit.metrics import Sample, write_textfile

    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    os.chmod(secret, 0o600)
    real_rename, real_replace = os.rename, os.replace

    def rename_then_swap(real):
        def swap(src, dst, *args, **kwargs):
            real(src, dst, *args, **kwargs)
            os.unlink(dst)
            os.symlink(secret, dst)

        return swap

    monkeypatch.setattr(os, "rename", rename_then_swap(real_rename))
    monkeypatch.setattr(os, "replace", rename_then_swap(real_replace))
    write_textfile(str(tmp_path / "m.prom"), [Sample("slurmkit_x", "doc", {}, 1)])
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600


def test_a_symlink_at_the_temporary_name_is_never_followed(tmp_path, monkeypatch):
    """The attacker knows (here: forces) the first temporary name and plants a link there:
    the writer neither writes through it nor chmods through it; it takes another name."""
    from slurmkit.metrics import Sample, write_textfile

    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    os.chmod(secret, 0o600)
    names = iter([b"\x01" * 6, b"\x02" * 6] * 3)
    monkeypatch.setattr(os, "urandom", lambda n: next(names))
    for i, write in enumerate(
        (
            lambda p: write_bytes_atomic(p, b"x", mode=0o644),
            lambda p: write_textfile(p, [Sample("slurmkit_x", "doc", {}, 1)]),
        )
    ):
        target = tmp_path / f"t{i}.prom"
        planted = tmp_path / f".{target.name}.{'01' * 6}.tmp"
        planted.symlink_to(secret)
        # prometheus-client's own temporary name, which slurmkit once used: <path>.<pid>.<thread>
        (tmp_path / f"{target.name}.{os.getpid()}.{threading.get_ident()}").symlink_to(secret)
        write(str(target))
        assert secret.read_text() == "root only\n" and stat.S_IMODE(os.stat(secret).st_mode) == 0o600
        assert planted.is_symlink()  # left alone, not reused
        assert target.read_bytes() and stat.S_IMODE(os.lstat(target).st_mode) == 0o644


def test_textfile_writes_refuse_a_directory_another_account_can_write(tmp_path):
    from slurmkit.core.trust import UntrustedFile
    from slurmkit.metrics import Sample, write_textfile

    shared = tmp_path / "open"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UntrustedFile):
        write_textfile(str(shared / "m.prom"), [Sample("slurmkit_x", "doc", {}, 1)])
    assert os.listdir(shared) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_owner_and_mode_are_set_before_the_file_appears(tmp_path, monkeypatch):
    """A 0600 file for another user (slurmdbd.conf, with a password) is never visible with
    root's owner or a wider mode: both are set on the temporary file, before the rename."""
    seen = []
    real_replace = os.replace

    def replace(src, dst):
        st = os.stat(src)
        seen.append((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "slurmdbd.conf"
    write_bytes_atomic(str(target), b"StoragePass=x\n", mode=0o600, owner=(65534, 65534))
    st = os.stat(target)
    assert seen == [(65534, 65534, 0o600)]
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o600)
    assert target.read_bytes() == b"StoragePass=x\n"
