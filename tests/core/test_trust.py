"""slurmkit.core.trust, function by function, without root (the hostile-user versions are in
tests/security/test_attack_trust.py; the ancestor and symlinked-lock rules in
tests/health/test_node_rules.py). Written to kill the mutants etc/dev/mutation.sh found
surviving (docs/testing.md)."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from slurmkit.core import trust

ME = os.geteuid()


@pytest.fixture(autouse=True)
def no_rejections():
    trust.REJECTED.clear()
    yield
    trust.REJECTED.clear()


def _dir(path, mode=0o755):
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


def _file(path, text="x", mode=0o644):
    path.write_text(text)
    path.chmod(mode)
    return path


def test_trusted_uids_are_root_me_and_the_extra_ones():
    assert trust.trusted_uids() == frozenset({0, ME})
    assert trust.trusted_uids([4242, 4343]) == frozenset({0, ME, 4242, 4343})


@pytest.mark.parametrize(
    "account, uid", [(None, None), ("", None), (0, 0), (1234, 1234), ("1234", 1234), ("root", 0)]
)
def test_uid_of(account, uid):
    assert trust.uid_of(account) == uid


def test_uid_of_a_name():
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    assert trust.uid_of("nobody") == nobody
    assert trust.uid_of("no-such-account-slurmkit") is None


def test_reject_remembers_and_logs(caplog):
    with caplog.at_level("WARNING", logger="slurmkit.trust"):
        trust.reject("/p", "why")
    assert trust.REJECTED == [("/p", "why")]
    assert "ignoring untrusted /p: why" in caplog.text


def test_mode_problem():
    st = os.stat_result((0o100644, 0, 0, 1, ME, 0, 0, 0, 0, 0))
    assert trust._mode_problem(st, frozenset({ME}), "f") is None
    st = os.stat_result((0o100664, 0, 0, 1, ME, 0, 0, 0, 0, 0))
    assert trust._mode_problem(st, frozenset({ME}), "f") == "f is writable by group or others (mode 0664)"
    st = os.stat_result((0o100646, 0, 0, 1, ME, 0, 0, 0, 0, 0))
    assert "writable by group or others (mode 0646)" in trust._mode_problem(st, frozenset({ME}), "f")
    st = os.stat_result((0o100600, 0, 0, 1, 4242, 0, 0, 0, 0, 0))
    why = trust._mode_problem(st, frozenset({ME}), "the file")
    assert why == f"the file is owned by uid 4242, not by a trusted account (uids {[ME]})"


def test_dir_problem_of_a_sound_dir_and_a_missing_one(tmp_path):
    d = _dir(tmp_path / "a" / "b")
    assert trust.dir_problem(str(d)) is None
    assert trust.dir_problem(str(d), frozenset({0, ME})) is None
    with pytest.raises(FileNotFoundError):
        trust.dir_problem(str(d / "missing" / "deeper"))


def test_dir_problem_names_the_directory_and_mode(tmp_path):
    d = _dir(tmp_path / "a" / "b")
    _dir(tmp_path / "a", 0o775)
    assert (
        trust.dir_problem(str(d)) == f"directory {tmp_path / 'a'} is writable by group or others (mode 0775)"
    )
    _dir(tmp_path / "a", 0o755)
    d.chmod(0o757)
    assert trust.dir_problem(str(d)) == f"directory {d} is writable by group or others (mode 0757)"


def test_dir_problem_of_a_file_in_the_chain(tmp_path):
    f = _file(tmp_path / "f")
    assert trust.dir_problem(str(f)) == f"{f} is not a directory"


def test_dir_problem_with_owners_that_exclude_the_tree(tmp_path):
    d = _dir(tmp_path / "a")
    why = trust.dir_problem(str(d), frozenset({4242}))
    assert why is not None and "is owned by uid" in why and "not by a trusted account" in why


def test_dir_problem_of_an_unreadable_component(tmp_path, monkeypatch):
    d = _dir(tmp_path / "a")
    real = os.lstat

    def lstat(path):
        if path == str(d):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(trust.os, "lstat", lstat)
    assert trust.dir_problem(str(d)) == f"{d}: Permission denied"


def test_a_sticky_writable_dir_is_fine_above_a_trusted_entry_only(tmp_path):
    top = _dir(tmp_path / "top", 0o1777)
    below = _dir(top / "mine")
    assert trust.dir_problem(str(below)) is None
    # the same sticky dir above an entry owned by an account that is not trusted: refused
    real = os.lstat

    def lstat(path):
        st = real(path)
        if path != str(below):
            return st
        return os.stat_result(
            (st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 4242, st.st_gid, st.st_size, 0, 0, 0)
        )

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trust.os, "lstat", lstat)
        assert (
            trust.dir_problem(str(below))
            == f"directory {below} is owned by uid 4242, not by a trusted account"
        )
    # a writable dir that is not sticky is refused above any entry
    top.chmod(0o777)
    assert trust.dir_problem(str(below)) == f"directory {top} is writable by group or others (mode 0777)"


def test_open_trusted_reads_a_sound_file(tmp_path):
    f = _file(_dir(tmp_path / "d") / "f", "hello")
    fd = trust.open_trusted(str(f))
    try:
        assert os.read(fd, 100) == b"hello"
        assert os.get_inheritable(fd) is False
    finally:
        os.close(fd)


def test_open_trusted_refuses_a_symlinked_file(tmp_path, monkeypatch):
    d = _dir(tmp_path / "d")
    target = _file(d / "target")
    link = d / "link"
    link.symlink_to(target)
    other = _file(d / "other")
    # a trusted link on the way is followed: a link to a sound file is that file
    os.close(trust.open_trusted(str(link)))
    # a link swapped in for the file after the walk is refused by O_NOFOLLOW
    real_resolve = trust._resolve

    def resolve_then_swap(path, owners):
        walked = real_resolve(path, owners)
        target.unlink()
        target.symlink_to(other)
        return walked

    monkeypatch.setattr(trust, "_resolve", resolve_then_swap)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.open_trusted(str(link))
    assert err.value.why == "is a symbolic link" and err.value.path == str(link)


def test_open_trusted_refuses_a_fifo_without_blocking(tmp_path):
    fifo = _dir(tmp_path / "d") / "fifo"
    os.mkfifo(fifo, 0o644)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.open_trusted(str(fifo))
    assert err.value.why == "is not a regular file"


def test_open_trusted_refuses_a_writable_file(tmp_path):
    f = _file(_dir(tmp_path / "d") / "f", mode=0o666)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.open_trusted(str(f))
    assert err.value.why == "the file is writable by group or others (mode 0666)"


def test_open_trusted_refuses_a_file_of_an_untrusted_owner(tmp_path, monkeypatch):
    f = _file(_dir(tmp_path / "d") / "f")
    real_resolve = trust._resolve
    # judge the file alone: the walk with the default owners, the opened file with 4242 only
    monkeypatch.setattr(trust, "_resolve", lambda path, owners: real_resolve(path, trust.trusted_uids()))
    with pytest.raises(trust.UntrustedFile) as err:
        trust.open_trusted(str(f), frozenset({4242}))
    assert err.value.why == f"the file is owned by uid {ME}, not by a trusted account (uids [4242])"


def test_open_trusted_of_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        trust.open_trusted(str(_dir(tmp_path / "d") / "missing"))


def test_open_trusted_other_open_errors_propagate(tmp_path, monkeypatch):
    f = _file(_dir(tmp_path / "d") / "f")

    def eacces(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(trust.os, "open", eacces)
    with pytest.raises(PermissionError):
        trust.open_trusted(str(f))


def test_open_trusted_closes_what_it_refuses(tmp_path, monkeypatch):
    f = _file(_dir(tmp_path / "d") / "f", mode=0o666)
    closed = []
    real_close = os.close
    monkeypatch.setattr(trust.os, "close", lambda fd: (closed.append(fd), real_close(fd)))
    with pytest.raises(trust.UntrustedFile):
        trust.open_trusted(str(f))
    assert len(closed) == 1


def test_read_strict_and_read_trusted(tmp_path):
    d = _dir(tmp_path / "d")
    f = _file(d / "f", "x" * 100_000)
    assert trust.read_strict(str(f)) == b"x" * 100_000  # more than one read
    assert trust.read_trusted(str(f)) == b"x" * 100_000
    assert trust.read_trusted(str(d / "missing")) is None
    with pytest.raises(FileNotFoundError):
        trust.read_strict(str(d / "missing"))
    assert trust.REJECTED == []


def test_read_strict_size_limit_exactly(tmp_path):
    f = _file(_dir(tmp_path / "d") / "f", "y" * 10)
    assert trust.read_strict(str(f), max_bytes=10) == b"y" * 10
    with pytest.raises(trust.UntrustedFile) as err:
        trust.read_strict(str(f), max_bytes=9)
    assert err.value.why == "larger than 9 bytes"
    assert trust.REJECTED == [(str(f), "larger than 9 bytes")]
    assert trust.read_trusted(str(f), max_bytes=9) is None
    assert trust.MAX_BYTES == 16 * 1024 * 1024


def test_read_strict_counts_a_refusal(tmp_path):
    f = _file(_dir(tmp_path / "d") / "f", mode=0o666)
    with pytest.raises(trust.UntrustedFile):
        trust.read_strict(str(f))
    assert trust.REJECTED == [(str(f), "the file is writable by group or others (mode 0666)")]
    trust.REJECTED.clear()
    assert trust.read_trusted(str(f)) is None
    assert len(trust.REJECTED) == 1


def test_read_strict_with_owners(tmp_path):
    f = _file(_dir(tmp_path / "d") / "f", "z")
    assert trust.read_strict(str(f), frozenset({0, ME})) == b"z"
    assert trust.read_trusted(str(f), frozenset({0, ME}), 1) == b"z"


def test_writable_dir_creates_with_modes(tmp_path):
    base = _dir(tmp_path / "base")
    target = base / "p1" / "p2" / "state"
    assert trust.writable_dir(str(target), 0o700) is None
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert stat.S_IMODE((base / "p1").stat().st_mode) == 0o755
    assert stat.S_IMODE((base / "p1" / "p2").stat().st_mode) == 0o755
    assert trust.writable_dir(str(base / "dflt")) is None
    assert stat.S_IMODE((base / "dflt").stat().st_mode) == 0o755


def test_writable_dir_keeps_an_existing_mode_and_says_why_not(tmp_path):
    d = _dir(tmp_path / "d", 0o775)
    assert trust.writable_dir(str(d), 0o700) == f"directory {d} is writable by group or others (mode 0775)"
    assert stat.S_IMODE(d.stat().st_mode) == 0o775
    assert trust.writable_dir(str(d), owners=frozenset({4242})) is not None


def test_writable_dir_reports_os_errors(tmp_path):
    f = _file(tmp_path / "file")
    why = trust.writable_dir(str(f / "sub"))
    assert why is not None and why.startswith(f"{f / 'sub'}: ")


def test_writable_dir_tolerates_a_race_on_creation(tmp_path, monkeypatch):
    d = tmp_path / "raced"
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777):
        real_mkdir(path, 0o755)
        raise FileExistsError(17, "File exists")

    monkeypatch.setattr(trust.os, "mkdir", mkdir)
    assert trust.writable_dir(str(d)) is None


def test_lock_creates_0600_and_narrows_an_older_wider_lock(tmp_path):
    path = tmp_path / "a.lock"
    os.close(trust.lock(str(path), 0.1))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    os.close(trust.lock(str(path), 0.1))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    other = tmp_path / "b.lock"
    os.close(trust.lock(str(other), 0.1, mode=0o644))
    assert stat.S_IMODE(other.stat().st_mode) == 0o644


def test_lock_descriptor_is_not_inherited(tmp_path):
    fd = trust.lock(str(tmp_path / "c.lock"), 0.1)
    try:
        assert os.get_inheritable(fd) is False
    finally:
        os.close(fd)


@pytest.mark.parametrize("posix", [False, True])
def test_lock_waits_then_times_out(tmp_path, posix):
    path = str(tmp_path / "d.lock")
    held = trust.lock(path, 0.1, posix=posix)
    try:
        result = {}

        def other():
            try:
                result["fd"] = trust.lock(path, 0.2, posix=posix)
            except BaseException as exc:  # noqa: BLE001 - the test reads it
                result["exc"] = exc

        if posix:  # record locks are per process: try from a child
            pid = os.fork()
            if pid == 0:
                try:
                    trust.lock(path, 0.2, posix=True)
                    os._exit(0)
                except TimeoutError:
                    os._exit(7)
                except BaseException:
                    os._exit(9)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 7
        else:
            t = threading.Thread(target=other)
            t.start()
            t.join(5)
            assert isinstance(result.get("exc"), TimeoutError), result
            assert "is locked by another process (waited 0.20s)" in str(result["exc"])
    finally:
        os.close(held)
    # released: taken at once
    os.close(trust.lock(path, 0.0, posix=posix))


def test_lock_is_taken_when_released_while_waiting(tmp_path):
    path = str(tmp_path / "e.lock")
    held = trust.lock(path, 0.1)
    threading.Timer(0.1, os.close, (held,)).start()
    fd = trust.lock(path, 2.0)
    os.close(fd)


def test_lock_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "f.lock"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.lock(str(fifo), 0.1)
    assert err.value.why == "lock file is not a regular file"


def test_lock_refuses_an_untrusted_owner(tmp_path):
    path = tmp_path / "g.lock"
    path.write_text("")
    path.chmod(0o600)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.lock(str(path), 0.1, owners=frozenset({4242}))
    assert err.value.why == f"lock file is owned by uid {ME}, not by a trusted account"
    os.close(trust.lock(str(path), 0.1, owners=frozenset({ME})))


def test_lock_other_errors_propagate(tmp_path):
    with pytest.raises(FileNotFoundError):
        trust.lock(str(tmp_path / "missing-dir" / "h.lock"), 0.1)


def test_lock_unexpected_lock_errors_propagate_and_close(tmp_path, monkeypatch):
    closed = []
    real_close = os.close
    monkeypatch.setattr(trust.os, "close", lambda fd: (closed.append(fd), real_close(fd)))

    def broken(fd, op):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(trust.fcntl, "flock", broken)
    with pytest.raises(OSError) as err:
        trust.lock(str(tmp_path / "i.lock"), 0.1)
    assert err.value.errno == 5 and len(closed) == 1


# --------------------------------------------------------------------------- the survivors of the first mutation run


def test_untrusted_file_message():
    exc = trust.UntrustedFile("/p", "why")
    assert str(exc) == "/p: why" and exc.path == "/p" and exc.why == "why"


def test_root_needs_no_account_lookup(monkeypatch):
    import pwd

    def no_nss(name):
        raise AssertionError("looked up " + name)

    monkeypatch.setattr(pwd, "getpwnam", no_nss)
    assert trust.uid_of("root") == 0


def test_other_execute_is_not_write():
    st = os.stat_result((0o100641, 0, 0, 1, ME, 0, 0, 0, 0, 0))
    assert trust._mode_problem(st, frozenset({ME}), "f") is None
    st = os.stat_result((0o040755 | 0o001, 0, 0, 1, ME, 0, 0, 0, 0, 0))
    assert trust._mode_problem(st, frozenset({ME}), "d") is None


def test_dir_problem_checks_the_first_level_directory(tmp_path, monkeypatch):
    """Every level, the first below / included (a writable, not sticky /tmp would do)."""
    first = "/" + str(tmp_path).split("/")[1]
    real = os.lstat

    def lstat(path):
        st = real(path)
        if path != first:
            return st
        mode = stat.S_IFDIR | 0o777  # writable by all, not sticky
        return os.stat_result((mode, st.st_ino, st.st_dev, st.st_nlink, 0, 0, st.st_size, 0, 0, 0))

    monkeypatch.setattr(trust.os, "lstat", lstat)
    assert trust.dir_problem(str(tmp_path)) == f"directory {first} is writable by group or others (mode 0777)"


def test_open_and_read_pass_their_owners_on(tmp_path):
    d = _dir(tmp_path / "d")
    f = _file(d / "f", "z")
    stranger = frozenset({4242})
    with pytest.raises(trust.UntrustedFile) as err:
        trust.open_trusted(str(f), stranger)
    assert err.value.path == str(f) and err.value.why.startswith("directory /")
    assert "not by a trusted account" in err.value.why
    with pytest.raises(trust.UntrustedFile):
        trust.read_strict(str(f), stranger)
    assert trust.read_trusted(str(f), stranger) is None
    assert trust.writable_dir(str(d), owners=stranger) is not None
    assert trust.writable_dir(str(d)) is None


def test_refusals_name_the_path(tmp_path):
    d = _dir(tmp_path / "d")
    fifo = d / "fifo"
    os.mkfifo(fifo, 0o644)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.open_trusted(str(fifo))
    assert err.value.path == str(fifo)
    big = _file(d / "big", "x" * 20)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.read_strict(str(big), max_bytes=10)
    assert err.value.path == str(big)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.lock(str(fifo), 0.1)
    assert err.value.path == str(fifo)
    link = d / "l.lock"
    link.symlink_to(d / "t")
    with pytest.raises(trust.UntrustedFile) as err:
        trust.lock(str(link), 0.1)
    assert (err.value.path, err.value.why) == (str(link), "lock file is a symbolic link")
    mine = _file(d / "m.lock", "", 0o600)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.lock(str(mine), 0.1, owners=frozenset({4242}))
    assert err.value.path == str(mine)


def test_the_size_limit_counts_every_chunk(tmp_path):
    f = _file(_dir(tmp_path / "d") / "f", "x" * 100_000)  # two reads of at most 64 KiB
    with pytest.raises(trust.UntrustedFile):
        trust.read_strict(str(f), max_bytes=70_000)


def test_a_read_that_would_block_ends_the_file(tmp_path, monkeypatch):
    f = _file(_dir(tmp_path / "d") / "f", "abc")

    def would_block(fd, n):
        raise BlockingIOError(11, "again")

    monkeypatch.setattr(trust.os, "read", would_block)
    assert trust.read_strict(str(f)) == b""


def test_missing_parents_are_made_0755_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        assert trust.writable_dir(str(_dir(tmp_path / "b") / "p" / "s"), 0o700) is None
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "b" / "p").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "b" / "p" / "s").stat().st_mode) == 0o700


def test_lock_modes_are_narrowed_never_widened(tmp_path):
    narrow = _file(tmp_path / "n.lock", "", 0o400)
    os.close(trust.lock(str(narrow), 0.1))
    assert stat.S_IMODE(narrow.stat().st_mode) == 0o400
    other = _file(tmp_path / "o.lock", "", 0o044)
    os.close(trust.lock(str(other), 0.1))
    assert stat.S_IMODE(other.stat().st_mode) == 0o600


def test_a_zero_timeout_does_not_wait(tmp_path):
    import time

    path = str(tmp_path / "z.lock")
    held = trust.lock(path, 0.1)
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            trust.lock(path, 0.0)
        assert time.monotonic() - t0 < 0.5
    finally:
        os.close(held)


def test_the_wait_polls_often(tmp_path):
    """Backing off from 2 ms to at most 50 ms: a lock freed after 0.05 s, or after 1.2 s, is
    taken within a few polls of that."""
    import time

    path = str(tmp_path / "w.lock")
    for hold in (0.05, 1.2):
        held = trust.lock(path, 0.1)
        threading.Timer(hold, os.close, (held,)).start()
        t0 = time.monotonic()
        os.close(trust.lock(path, 5.0))
        assert time.monotonic() - t0 < hold + 0.4, hold
