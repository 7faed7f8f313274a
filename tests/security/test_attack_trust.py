"""Attack: steer root through files a user can write or lock (issue 10, rule 1).

Root-run code reads state, tables and configs only from root's files in directories
nobody else can write (sshd's StrictModes), and no lock of root's can be opened by a
user. Each test runs the attacker's part as the unprivileged ``sk-mallory``.
"""

from __future__ import annotations

import json
import os
import stat
import time

import pytest
from attack_helpers import as_user, spawn_as_user
from suite_guards import private_view

HOLD_EVERY_LOCK = r"""
import fcntl, glob, os, sys, time
held = []
for pattern in sys.argv[1:]:
    for p in sorted(glob.glob(pattern)):
        try:
            fd = os.open(p, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append((fd, p))
        except OSError:
            pass
print("held", len(held), " ".join(p for _, p in held), flush=True)
time.sleep(120)
"""


def test_a_user_cannot_hold_the_xid_lock_to_turn_an_xid_79_into_a_pass(node, unprivileged_users):
    """Old: the cursor lock file was 0644, so a user could open and flock it; the prolog then
    timed out on the lock and an Xid 79 read `unknown, exit 0`."""
    attacker, _ = unprivileged_users
    assert node.hook("prolog").returncode == 0  # first job: creates the state files
    hog = spawn_as_user(
        attacker, HOLD_EVERY_LOCK, node.paths["state_dir"] + "/*", node.paths["log_dir"] + "/*"
    )
    try:
        ready = hog.stdout.readline()
        assert ready.startswith("held"), hog.stderr.read() if hog.poll() is not None else ready
        node.add_xid(79)
        res = node.hook("prolog", job_id="4243")
        rec = node.records()[-1]
        assert res.returncode == 1, (res.stderr, rec)
        assert node.result(rec, "xid")["status"] == "fail"
    finally:
        hog.kill()
        hog.wait()


def test_no_lock_or_state_file_is_lockable_by_a_user(node, unprivileged_users):
    attacker, _ = unprivileged_users
    node.add_xid(79)
    assert node.hook("prolog").returncode == 1
    # every state file, and every lock (the logs themselves are world-readable on purpose)
    res = as_user(
        attacker,
        HOLD_EVERY_LOCK.replace("time.sleep(120)", ""),
        node.paths["state_dir"] + "/*",
        node.paths["state_dir"] + "/.*",
        node.paths["log_dir"] + "/*.lock",
    )
    held = res.stdout.split()
    assert held[:2] == ["held", "0"], (res.stdout, res.stderr)
    for name in os.listdir(node.paths["state_dir"]):
        mode = stat.S_IMODE(os.stat(os.path.join(node.paths["state_dir"], name)).st_mode)
        assert mode == 0o600, (name, oct(mode))


def test_a_forged_cursor_in_a_user_writable_state_dir_is_ignored(node, unprivileged_users):
    """Old: with state_dir on a world-writable directory a user's cursor saying "everything
    already seen" hid every Xid. Now the file is ignored (log line, metric) and nothing
    is written there."""
    attacker, _ = unprivileged_users
    state = node.root / "shared-tmp"
    state.mkdir()
    os.chmod(state, 0o1777)
    node.write_config(state_dir=str(state))
    forge = (
        "import json, sys; json.dump({'last_timestamp': 1e12, 'events_seen': 0}, "
        "open(sys.argv[1] + '/xid-cursor.node1.json', 'w'))"
    )
    res = as_user(attacker, forge, str(state))
    assert res.returncode == 0, res.stderr
    node.add_xid(79)
    res = node.hook("prolog")
    rec = node.records()[-1]
    assert res.returncode == 1, (res.stderr, rec)
    assert node.result(rec, "xid")["status"] == "fail"
    assert any("xid-cursor.node1.json" in u for u in rec["untrusted_files"])
    metrics = (node.root / "metrics" / "slurmkit_health_prolog_node1.prom").read_text()
    assert 'slurmkit_health_untrusted_files{hook="prolog",node="node1"} ' in metrics
    assert sorted(os.listdir(state)) == ["xid-cursor.node1.json"]  # root wrote nothing there


def test_a_xid_table_a_user_can_write_is_ignored(node, unprivileged_users):
    """Old: a configured table the attacker owns mapped Xid 79 to `none`: the node passed."""
    attacker, _ = unprivileged_users
    table = node.root / "xid-site.yaml"
    table.write_text("version: evil\nxids:\n  79: {action: none, name: harmless}\n")
    os.chown(table, *_ids(attacker))
    node.health["checks"] = {"xid": {"table": str(table)}}
    node.write_config()
    node.add_xid(79)
    res = node.hook("prolog")
    rec = node.records()[-1]
    assert res.returncode == 1, (res.stderr, rec)
    assert node.result(rec, "xid")["code"] == "XID_79"
    assert any("xid-site.yaml" in u for u in rec["untrusted_files"])


def test_root_refuses_a_config_a_user_can_write(node, unprivileged_users, tmp_path):
    """Old: root read any config it was pointed at; one that switches the Xid check off
    was applied. Now it is a config error (fail open, logged, metric), not obeyed.

    With its config refused the prolog records the error under the system's default paths,
    as a node's would; those are private to this run (an overlay in a mount namespace of its
    own, :func:`suite_guards.private_system_paths`), so the record is read from the overlay."""
    attacker, _ = unprivileged_users
    node.health["checks"] = {"xid": {"enabled": False}}
    node.write_config()
    os.chown(node.config, *_ids(attacker))
    node.add_xid(79)
    res = node.hook("prolog", private_defaults=tmp_path)
    assert "config error, failing open" in res.stderr and "not trusted" in res.stderr, res.stderr
    assert res.returncode == 0, res.stderr
    assert node.records() == []  # the hostile config's paths were not used either
    # ... but the defaults were, for the record and the metric of the config error
    log = private_view(tmp_path, "/var/log/slurmkit/health.jsonl")
    rec = json.loads(log.read_text().splitlines()[-1])
    assert (rec["hook"], rec["job_id"], rec["exit_code"]) == ("prolog", "4242", 0), rec
    assert [r["code"] for r in rec["results"]] == ["CONFIG_ERROR"], rec
    metrics = private_view(tmp_path, "/var/lib/prometheus/node-exporter/slurmkit_health_prolog_node1.prom")
    assert 'slurmkit_health_internal_error{hook="prolog",node="node1"} 1' in metrics.read_text()


def test_predictable_mount_write_test_names_cannot_be_pre_created(node, unprivileged_users, tmpfs):
    """Old: the probe was `.slurmkit-write-test.<pid>`; a user who pre-created it (for the
    pids to come) failed the check: MOUNT_NOT_WRITABLE and a drain."""
    attacker, _ = unprivileged_users
    from slurmkit.health.checks.host import check_mounts

    mnt = tmpfs(node.root / "scratch", size="1m")
    os.chmod(mnt, 0o1777)
    me = os.getpid()
    squat = (
        "import sys\nfor pid in range(int(sys.argv[2]) - 5, int(sys.argv[2]) + 50):\n"
        "    open(f'{sys.argv[1]}/.slurmkit-write-test.{pid}', 'w')"
    )
    res = as_user(attacker, squat, str(mnt), str(me))
    assert res.returncode == 0, res.stderr
    r = check_mounts(None, {"required": [str(mnt)], "write_test": True})
    assert r.status.value == "ok", r.reason
    assert len(os.listdir(mnt)) == 55  # the probe left nothing behind


def _ids(user):
    import pwd

    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


# ---------------------------------------------------------------- the rule itself


def test_trust_rule(tmp_path, unprivileged_users):
    from slurmkit.core import trust

    attacker, _ = unprivileged_users
    uid, gid = _ids(attacker)
    good = tmp_path / "good.json"
    good.write_text("{}")
    assert trust.read_trusted(str(good)) == b"{}"
    bad_owner = tmp_path / "theirs.json"
    bad_owner.write_text("{}")
    os.chown(bad_owner, uid, gid)
    group_writable = tmp_path / "gw.json"
    group_writable.write_text("{}")
    os.chmod(group_writable, 0o664)
    link = tmp_path / "link.json"
    link.symlink_to(good)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    for p in (bad_owner, group_writable, fifo):
        with pytest.raises(trust.UntrustedFile):
            trust.open_trusted(str(p))
    assert time.monotonic() - t0 < 1  # the FIFO never blocked the open
    # a symlink is resolved once and its target judged: the good file is fine
    assert trust.read_trusted(str(link)) == b"{}"
    # a directory others can write makes every file in it untrusted, sticky or not
    for mode in (0o777, 0o1777, 0o775):
        d = tmp_path / f"d{mode:o}"
        d.mkdir()
        os.chmod(d, mode)
        (d / "f").write_text("x")
        with pytest.raises(trust.UntrustedFile):
            trust.open_trusted(str(d / "f"))
    # ... but a sticky directory above a root-owned 0755 one is fine (/tmp/<root's dir>)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (sticky / "mine").mkdir()
    (sticky / "mine" / "f").write_text("ok")
    assert trust.read_trusted(str(sticky / "mine" / "f")) == b"ok"
    (sticky / "theirs").mkdir()
    os.chown(sticky / "theirs", uid, gid)
    (sticky / "theirs" / "f").write_text("no")
    assert trust.read_trusted(str(sticky / "theirs" / "f")) is None
    assert trust.read_trusted(str(tmp_path / "missing")) is None


def test_state_written_by_slurmkit_has_private_modes(node):
    node.add_xid(79)
    assert node.hook("prolog").returncode == 1
    state = node.paths["state_dir"]
    assert stat.S_IMODE(os.stat(state).st_mode) & 0o022 == 0
    for name in os.listdir(state):
        assert stat.S_IMODE(os.stat(os.path.join(state, name)).st_mode) == 0o600, name
    log = os.path.join(node.paths["log_dir"], "health.jsonl")
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(log + ".lock").st_mode) == 0o600
    json.loads(open(log).read().splitlines()[-1])


# ---------------------------------------------------------------- paths.* under a sticky directory

MAKE_LINKS = "import os, sys\nfor link in sys.argv[2:]:\n    os.symlink(sys.argv[1], link)\n"


def test_a_users_symlink_in_a_sticky_dir_does_not_redirect_roots_log_and_metrics(node, unprivileged_users):
    """Old: with ``paths.log_dir``/``metrics_dir`` under a sticky directory (a site that puts
    them in /tmp), the trust check resolved the path with ``realpath`` first and judged the
    target: a user's link there pointing to a root-only directory passed, and root wrote its
    health log and metrics wherever the link pointed. Now each step of the path is checked
    before it is taken: a link owned by a user is refused, and nothing is written."""
    attacker, _ = unprivileged_users
    sticky = node.root / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    protected = node.root / "protected"  # root's 0755 directory the attacker wants filled
    protected.mkdir()
    os.chmod(protected, 0o755)
    node.write_config(log_dir=str(sticky / "log"), metrics_dir=str(sticky / "metrics"))
    res = as_user(attacker, MAKE_LINKS, str(protected), str(sticky / "log"), str(sticky / "metrics"))
    assert res.returncode == 0, res.stderr
    hook = node.hook("prolog")
    assert hook.returncode == 0, hook.stderr
    assert os.listdir(protected) == [], "root wrote through the user's symlink"
    assert "cannot write the health log" in hook.stderr and "cannot write metrics" in hook.stderr
    assert "symbolic link" in hook.stderr and "not by a trusted account" in hook.stderr
    # a link root made there itself is followed as before
    for name in ("log", "metrics"):
        os.unlink(sticky / name)
        os.symlink(protected, sticky / name)
    assert node.hook("prolog").returncode == 0
    assert sorted(os.listdir(protected)) == [
        "health.jsonl",
        "health.jsonl.lock",
        "slurmkit_health_prolog_node1.prom",
    ]


def test_a_users_symlink_as_an_ancestor_of_the_state_and_log_dirs_is_refused(node, unprivileged_users):
    """The ancestor case: the user's link is not the directory itself but one level above it
    (``/tmp/<link>/log`` with the link pointing to root's tree that has a ``log`` in it).
    ``realpath`` made that root's own path; walking it finds the user's link."""
    attacker, _ = unprivileged_users
    sticky = node.root / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    protected = node.root / "protected"
    for sub in ("log", "state", "metrics"):
        (protected / sub).mkdir(parents=True)
    os.chmod(protected, 0o755)
    base = sticky / "slurmkit"
    node.write_config(
        log_dir=str(base / "log"), state_dir=str(base / "state"), metrics_dir=str(base / "metrics")
    )
    assert as_user(attacker, MAKE_LINKS, str(protected), str(base)).returncode == 0
    node.add_xid(79)
    hook = node.hook("prolog")
    assert hook.returncode == 1, hook.stderr  # the verdict stands; only the writes are refused
    for sub in ("log", "state", "metrics"):
        assert os.listdir(protected / sub) == [], sub
    # a user-owned real directory above them is refused as before
    os.unlink(base)
    base.mkdir()
    os.chown(base, *_ids(attacker))
    for sub in ("log", "state", "metrics"):
        (base / sub).mkdir()
    assert node.hook("prolog", job_id="4243").returncode == 1
    for sub in ("log", "state", "metrics"):
        assert os.listdir(base / sub) == [], sub


def test_the_walk_follows_only_trusted_links(tmp_path, unprivileged_users):
    from slurmkit.core import trust

    attacker, _ = unprivileged_users
    uid, gid = _ids(attacker)
    real = tmp_path / "real"
    real.mkdir()
    (real / "f").write_text("ok")
    (tmp_path / "rootlink").symlink_to("real")  # relative, root's
    assert trust.read_trusted(str(tmp_path / "rootlink" / "f")) == b"ok"
    assert trust.read_trusted(str(tmp_path / "rootlink" / ".." / "real" / "f")) == b"ok"
    theirs = tmp_path / "theirs"
    theirs.symlink_to(real)
    os.lchown(theirs, uid, gid)
    assert trust.read_trusted(str(theirs / "f")) is None
    assert "symbolic link" in trust.dir_problem(str(theirs))
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    assert "symbolic links" in trust.dir_problem(str(loop))
    assert trust.dir_problem(str(real)) is None
