"""The one way a job creates a private directory in shared space (core.trust.private_dir_problem):
``mkdir`` 0700, then a walk with ``lstat`` that refuses anything another user could have
prepared. Ownership cases need root (``chown`` to another uid)."""

import os
import stat

import pytest

from slurmkit.core.trust import private_dir_problem

OTHER = 65534  # nobody

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@pytest.fixture
def shared(tmp_path):
    """A world-writable sticky tree like /tmp."""
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


def test_creates_every_missing_level_private(shared):
    target = shared / "a" / "b"
    assert private_dir_problem(str(target), forbidden=0o077) is None
    for d in (shared / "a", target):
        st = os.lstat(d)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()


def test_an_existing_private_directory_of_ours_is_reused(shared):
    (shared / "mine").mkdir(mode=0o700)
    (shared / "mine" / "kept").write_text("x")
    assert private_dir_problem(str(shared / "mine"), forbidden=0o077) is None
    assert (shared / "mine" / "kept").exists()


def test_our_own_directory_with_a_wider_mode_is_refused(shared):
    for mode, forbidden, refused in ((0o755, 0o077, True), (0o755, 0o022, False), (0o775, 0o022, True)):
        d = shared / f"m{mode:o}{forbidden:o}"
        d.mkdir()
        os.chmod(d, mode)
        why = private_dir_problem(str(d), forbidden=forbidden)
        assert (why is not None) == refused, (mode, forbidden, why)
        if refused:
            assert f"mode {mode:04o}" in why


@needs_root
def test_a_directory_of_another_user_is_refused(shared):
    d = shared / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, OTHER, OTHER)
    why = private_dir_problem(str(d), forbidden=0o077)
    assert why and f"uid {OTHER}" in why


@needs_root
def test_a_symlink_another_user_planted_is_refused_wherever_it_points(shared, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = shared / "link"
    link.symlink_to(mine)
    os.lchown(link, OTHER, OTHER)
    why = private_dir_problem(str(link), forbidden=0o077)
    assert why and "symbolic link" in why
    # and as an ancestor
    assert "symbolic link" in private_dir_problem(str(link / "sub"), forbidden=0o077)
    assert not (mine / "sub").exists()


def test_a_regular_file_in_place_of_the_directory_is_refused(shared):
    (shared / "f").write_text("x")
    assert "not a directory" in private_dir_problem(str(shared / "f"))


@needs_root
def test_an_ancestor_another_user_can_write_is_refused(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)  # not sticky: anyone can rename what we create in it
    why = private_dir_problem(str(open_dir / "job"))
    assert why and "writable by group or others" in why
    owned = tmp_path / "owned"
    owned.mkdir()
    os.chown(owned, OTHER, OTHER)
    assert f"uid {OTHER}" in private_dir_problem(str(owned / "job"))
