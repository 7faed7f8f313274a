"""The trust rule's walk (core.trust._resolve) component by component, and the exact refusals
of the trust functions: what the error names (the path asked for, the entry at fault, its
kind), the ``.`` and ``..`` a symbolic link's target holds, the link limit at its exact
boundary, the lock file's mode from its creation on. Without root; as root the entries that
must be foreign are given to uid 4242 (written for the survivors of
``etc/dev/mutation.sh trust``, docs/testing.md)."""

from __future__ import annotations

import errno
import logging
import os
import secrets

import pytest

from slurmkit.core import trust

ME = os.geteuid()
OWNERS = frozenset({0, ME})
FOREIGN = 4242


@pytest.fixture(autouse=True)
def no_rejections():
    trust.REJECTED.clear()
    yield
    trust.REJECTED.clear()


def _foreign(path: str) -> None:
    """``path`` owned by an account the walk does not trust: uid 4242 as root; as anyone
    else the entry stays ours, and the walk is given root alone to trust."""
    if ME == 0:
        os.lchown(path, FOREIGN, FOREIGN)


FOREIGN_OWNERS = frozenset({0})  # (as root, ``_foreign`` entries belong to 4242)


@pytest.fixture
def in_tmp():
    """A fresh name in /tmp (root's, sticky: every entry there is judged on its own owner),
    removed afterwards whatever it became."""
    name = os.path.join("/tmp", "slurmkit-walk-" + secrets.token_hex(8))
    yield name
    if os.path.islink(name) or os.path.isfile(name):
        os.unlink(name)
    elif os.path.isdir(name):
        os.rmdir(name)


def _why(path: str, owners: frozenset = OWNERS) -> trust.UntrustedFile:
    with pytest.raises(trust.UntrustedFile) as err:
        trust._resolve(path, owners)
    assert err.value.path == os.path.abspath(path)  # the path asked for, not the entry at fault
    assert str(err.value) == f"{err.value.path}: {err.value.why}"
    return err.value


def test_the_root_resolves_to_itself_and_is_its_own_parent():
    real, st, parent = trust._resolve("/", OWNERS)
    assert real == "/" and st == os.lstat("/") and parent == os.lstat("/")


def test_a_path_one_below_the_root_has_the_root_as_parent():
    real, st, parent = trust._resolve("/tmp", OWNERS)
    assert real == "/tmp" and st == os.lstat("/tmp") and parent == os.lstat("/")


def test_a_deeper_path_has_its_own_directory_as_parent(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    f = d / "f"
    f.write_text("x")
    real, st, parent = trust._resolve(str(f), OWNERS)
    assert real == str(f) and st == os.lstat(f) and parent == os.lstat(d)


def test_dot_and_dot_dot_in_a_link_target_are_walked_as_the_kernel_walks_them(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    target = tmp_path / "a" / "t"
    target.write_text("x")
    (tmp_path / "a" / "b" / "up").symlink_to("../t")  # .. leaves b
    (tmp_path / "a" / "here").symlink_to("./t")  # . stays, and the walk goes on
    (tmp_path / "a" / "b" / "both").symlink_to("./.././t")
    for link in ("a/b/up", "a/here", "a/b/both"):
        assert trust._resolve(str(tmp_path / link), OWNERS)[0] == str(target), link


def test_dot_dot_above_the_root_stays_at_the_root(tmp_path):
    levels = len(tmp_path.parts)  # more ..'s than there are directories above the link
    (tmp_path / "high").symlink_to("/".join([".."] * (levels + 3)) + "/tmp")
    assert trust._resolve(str(tmp_path / "high"), OWNERS)[0] == "/tmp"
    (tmp_path / "top").symlink_to("/".join([".."] * (levels + 3)))
    assert trust._resolve(str(tmp_path / "top"), OWNERS)[0] == "/"


def test_an_absolute_link_target_starts_again_from_the_root(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "abs").symlink_to("/tmp")
    real, _, parent = trust._resolve(str(tmp_path / "d" / "abs"), OWNERS)
    assert real == "/tmp" and parent == os.lstat("/")


def test_a_file_on_the_way_is_not_a_directory(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    err = _why(str(f / "below"))
    assert err.why == f"{f} is not a directory"


def test_an_entry_that_cannot_be_looked_at_is_refused_by_name(tmp_path):
    long = tmp_path / ("n" * 300)  # ENAMETOOLONG: an OSError, not a missing file
    err = _why(str(long / "x"))
    assert err.why == f"{long}: {os.strerror(errno.ENAMETOOLONG)}"


def test_a_missing_component_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        trust._resolve(str(tmp_path / "absent" / "x"), OWNERS)


@pytest.mark.parametrize("kind", ["file", "directory", "symbolic link"])
def test_an_untrusted_entry_is_named_with_its_kind_and_owner(in_tmp, kind):
    if kind == "file":
        with open(in_tmp, "w") as fh:
            fh.write("x")
    elif kind == "directory":
        os.mkdir(in_tmp, 0o755)
    else:
        os.symlink("/tmp", in_tmp)
    _foreign(in_tmp)
    owner = os.lstat(in_tmp).st_uid
    assert owner not in FOREIGN_OWNERS
    err = _why(in_tmp, FOREIGN_OWNERS)
    assert err.why == f"{kind} {in_tmp} is owned by uid {owner}, not by a trusted account"


def test_a_writable_directory_on_the_way_is_named_with_its_mode(tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o777)
    (d / "f").write_text("x")
    err = _why(str(d / "f"))
    assert err.why == f"directory {d} is writable by group or others (mode 0777)"


def _chain(tmp_path, links: int):
    """``l0 -> l1 -> ... -> target``: ``links`` symbolic links to follow from ``l0``."""
    target = tmp_path / "target"
    target.write_text("x")
    names = [tmp_path / f"l{i}" for i in range(links)]
    for i, name in enumerate(names):
        name.symlink_to(names[i + 1] if i + 1 < links else target)
    return names[0], target


def test_exactly_the_link_limit_is_followed(tmp_path):
    first, target = _chain(tmp_path, trust._MAX_LINKS)
    assert trust._resolve(str(first), OWNERS)[0] == str(target)


def test_one_link_beyond_the_limit_is_refused(tmp_path):
    first, _ = _chain(tmp_path, trust._MAX_LINKS + 1)
    assert _why(str(first)).why == "too many levels of symbolic links"


def test_the_link_limit_is_the_kernels():
    # Linux follows at most 40 links in one lookup (path_resolution(7), MAXSYMLINKS)
    assert trust._MAX_LINKS == 40


def test_a_file_replaced_between_the_walk_and_the_open_is_refused_by_name(tmp_path, monkeypatch):
    d = tmp_path / "d"
    d.mkdir()
    f = d / "f"
    f.write_text("x")
    real_resolve = trust._resolve

    def resolve_then_replace(path, owners):
        walked = real_resolve(path, owners)
        f.rename(d / "old")  # kept, so that its inode is not the new file's
        f.write_text("y")  # another inode at the same name
        return walked

    monkeypatch.setattr(trust, "_resolve", resolve_then_replace)
    with pytest.raises(trust.UntrustedFile) as err:
        trust.open_trusted(str(f))
    assert (err.value.path, err.value.why) == (str(f), "was replaced while it was being checked")


@pytest.mark.parametrize("account", [None, ""])
def test_no_account_is_no_uid_without_asking_the_name_service(account, monkeypatch):
    import pwd

    def no_lookup(name):
        raise AssertionError(f"looked up {name!r}")

    monkeypatch.setattr(pwd, "getpwnam", no_lookup)
    assert trust.uid_of(account) is None


def test_a_rejection_is_logged_by_the_trust_logger_in_these_words(caplog):
    with caplog.at_level(logging.WARNING, logger="slurmkit.trust"):
        trust.reject("/p", "why")
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("slurmkit.trust", "WARNING", "ignoring untrusted /p: why")
    ]


def test_a_new_lock_file_has_its_mode_from_its_creation(tmp_path, monkeypatch):
    """Created with ``mode`` under any umask, not opened wider and narrowed afterwards (in
    between, anyone could open it and hold the lock)."""

    def no_narrowing(fd, mode):
        raise AssertionError("a new lock file was narrowed after its creation")

    old = os.umask(0)
    try:
        monkeypatch.setattr(trust.os, "fchmod", no_narrowing)
        fd = trust.lock(str(tmp_path / "x.lock"), 1.0, mode=0o640)
        os.close(fd)
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "x.lock").st_mode & 0o777 == 0o640


def test_a_file_in_a_sticky_shared_directory_is_refused_by_name(in_tmp):
    """/tmp passes the walk (sticky), but a file root reads must not sit in a directory
    others can write."""
    with open(in_tmp, "w") as fh:
        fh.write("x")
    with pytest.raises(trust.UntrustedFile) as err:
        trust.open_trusted(in_tmp)
    mode = os.lstat("/tmp").st_mode & 0o7777
    assert (err.value.path, err.value.why) == (
        in_tmp,
        f"directory /tmp is writable by group or others (mode {mode:04o})",
    )


def test_a_private_directory_is_judged_for_the_user_asked_for(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir(mode=0o700)
    assert trust.private_dir_problem(str(d), uid=ME) is None
    other = 4242 if ME != 4242 else 4343
    assert trust.private_dir_problem(str(d), uid=other) == (
        f"{d} belongs to uid {ME}, not to uid {other} (this job's user)"
    )


def test_levels_are_created_below_an_existing_directory_only_others_cannot_write(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    base.chmod(0o755)  # others may read and enter it: not a reason to refuse
    assert trust.private_dir_problem(str(base / "a" / "b")) is None
    assert (base / "a" / "b").is_dir()
    base.chmod(0o777)  # not sticky: anyone could have planted or could swap what is made there
    assert trust.private_dir_problem(str(base / "c" / "d")) == (
        f"directory {base} is writable by group or others (mode 0777)"
    )
    assert not (base / "c").exists()
    base.chmod(0o1777)  # sticky, as /tmp: each entry is its owner's
    assert trust.private_dir_problem(str(base / "e")) is None
