"""Attack: drain a node by filling a filesystem every user can write (issue 25).

The default free-space check on ``/tmp`` failed as soon as any user filled ``/tmp``, and a
user who used up the inodes of a user-writable mount in ``mounts.required`` made its
write test fail: a FAIL, so the prolog drained the node (every node, for a shared mount).
Now a problem on a path users can write is a WARN (``disk_space``, ``mounts``); a
root-only filesystem that is full still fails. The filesystems here are real tmpfs mounts,
filled by the unprivileged attacker.
"""

from __future__ import annotations

import os

from attack_helpers import as_user

FILL_BLOCKS = r"""
import os, sys
fd = os.open(os.path.join(sys.argv[1], "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
try:
    while True:
        os.write(fd, b"\0" * 65536)
except OSError:
    pass
try:
    while True:
        os.write(fd, b"\0")
except OSError:
    print("full")
"""

FILL_INODES = r"""
import os, sys
n = 0
try:
    while True:
        os.close(os.open(os.path.join(sys.argv[1], f"f{n}"), os.O_WRONLY | os.O_CREAT, 0o600))
        n += 1
except OSError as exc:
    print("inodes used up after", n, exc.strerror)
"""


def _configure(node, paths, mounts):
    node.health["checks"] = {
        "disk_space": {"paths": {p: {"min_free_gb": 0.001, "min_free_inodes_pct": 1.0} for p in paths}},
        "mounts": {"required": mounts, "write_test": True},
    }
    node.write_config()


def test_a_user_who_fills_tmp_does_not_drain_the_node(node, unprivileged_users, tmpfs):
    attacker, _ = unprivileged_users
    tmp = tmpfs(node.root / "tmp", size="256k")
    os.chmod(tmp, 0o1777)
    res = as_user(attacker, FILL_BLOCKS, str(tmp), timeout=60)
    assert "full" in res.stdout, res.stderr
    st = os.statvfs(tmp)
    assert st.f_bavail == 0  # really full
    _configure(node, [str(tmp)], [str(tmp)])
    hook = node.hook("prolog")
    rec = node.records()[-1]
    assert hook.returncode == 0, (hook.stderr, rec)
    disk = node.result(rec, "disk_space")
    assert disk["status"] == "warn" and disk["code"] == "DISK_FREE_LOW", disk
    assert rec["status"] != "fail" and not rec.get("drain_reason")


def test_a_user_who_uses_up_a_shared_mounts_inodes_gets_a_warning_not_a_drain(
    node, unprivileged_users, tmpfs
):
    attacker, _ = unprivileged_users
    scratch = tmpfs(node.root / "scratch", size="1m,nr_inodes=64")
    os.chmod(scratch, 0o1777)
    res = as_user(attacker, FILL_INODES, str(scratch), timeout=60)
    assert "inodes used up" in res.stdout, res.stderr
    _configure(node, [str(scratch)], [str(scratch)])
    hook = node.hook("prolog")
    rec = node.records()[-1]
    assert hook.returncode == 0, (hook.stderr, rec)
    mounts = node.result(rec, "mounts")
    assert mounts["status"] == "warn" and mounts["code"] == "MOUNT_NOT_WRITABLE", mounts
    assert "not draining" in mounts["reason"]
    disk = node.result(rec, "disk_space")
    assert disk["status"] == "warn" and disk["code"] == "DISK_INODES_LOW", disk


def test_a_full_root_only_filesystem_still_fails(node, tmpfs):
    """The warning is for what users can fill; a root-only filesystem that is out of inodes
    is a node fault as before."""
    state = tmpfs(node.root / "rootonly", size="1m,nr_inodes=64")
    n = 0
    try:
        while True:
            os.close(os.open(state / f"f{n}", os.O_WRONLY | os.O_CREAT, 0o600))
            n += 1
    except OSError:
        pass
    _configure(node, [str(state)], [str(state)])
    hook = node.hook("prolog")
    rec = node.records()[-1]
    assert hook.returncode == 1, (hook.stderr, rec)
    assert node.result(rec, "mounts")["status"] == "fail"
    assert node.result(rec, "disk_space")["status"] == "fail"
