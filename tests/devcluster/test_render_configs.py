"""The devcluster's files as rendered (slurmkit/devcluster/render.py): no root, no Slurm.

Each file is parsed the way slurmkit itself reads Slurm's files (``slurm.parse.conf_records``,
``expand_hostlist``, ``gpus_from_gres``) and the parsed keys are asserted, for 1 and several
nodes, both network modes and every supported release.
"""

import ast
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from slurmkit.config import SiteConfig
from slurmkit.core.yamlload import load_yaml_text
from slurmkit.devcluster import releases, render
from slurmkit.devcluster.render import ClusterSpec
from slurmkit.slurm.parse import conf_records, expand_hostlist, gpus_from_gres

ROOT = Path("/srv/dc state")  # a blank in it: every path must survive it
REPO = Path("/opt/slurmkit")
RELEASES = sorted(releases.RELEASES)
NODES = (1, 2, 5)


def machine(release="22.05", root=ROOT):
    return render.Machine(root=root, hostname="ctl", release=releases.get(release))


def records(text):
    return [kv for _, kv in conf_records(text)]


def parse_slurm_conf(text):
    """slurm.conf as (single settings, node lines, partition lines); a setting given twice
    is an error (Slurm keeps the last one: the file would not say what it seems to)."""
    settings, nodes, partitions = {}, [], []
    for kv in records(text):
        first = next(iter(kv))
        if first == "nodename":
            nodes.append(kv)
        elif first == "partitionname":
            partitions.append(kv)
        else:
            assert len(kv) == 1, kv
            assert first not in settings, f"{first} set twice"
            settings.update(kv)
    return settings, nodes, partitions


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("nodes", NODES)
@pytest.mark.parametrize("mode", ["netns", "ports"])
def test_slurm_conf_parses_to_the_production_configuration(release, nodes, mode):
    spec = ClusterSpec(mode=mode, nodes=nodes, gpus_per_node=8, gpu_type="h100")
    settings, node_lines, partitions = parse_slurm_conf(render.slurm_conf(spec, machine(release)))

    assert settings["proctracktype"] == "proctrack/cgroup"
    assert settings["taskplugin"] == "task/cgroup"
    assert settings["prologflags"] == "Alloc,Contain"
    assert settings["selecttype"] == "select/cons_tres"
    assert settings["grestypes"] == "gpu"
    if release == "26.05":  # Slurm 25.11 renamed the job_container plugins
        assert settings["namespacetype"] == "namespace/tmpfs" and "jobcontainertype" not in settings
    else:
        assert settings["jobcontainertype"] == "job_container/tmpfs" and "namespacetype" not in settings
    assert settings["accountingstoragetres"] == "gres/gpu,gres/gpu:h100"

    # the one node line names every node, each with its own address (netns) or port (ports)
    (node,) = node_lines
    assert expand_hostlist(node["nodename"]) == [f"node{i}" for i in range(1, nodes + 1)]
    assert gpus_from_gres(node["gres"]) == {"h100": 8}
    assert (node["cpus"], node["realmemory"], node["state"]) == ("16", "64000", "UNKNOWN")
    ctld = "10.77.0.1" if mode == "netns" else "127.0.0.1"
    assert settings["slurmctldhost"] == f"ctl({ctld})"
    assert settings["accountingstoragehost"] == ctld
    if mode == "netns":
        assert node["nodeaddr"].split(",") == [f"10.77.0.{10 + i}" for i in range(1, nodes + 1)]
        assert node["port"] == settings["slurmdport"] == "16818"
        assert "nodehostname" not in node
    else:
        assert node["nodeaddr"] == "127.0.0.1" and node["nodehostname"] == "ctl"
        assert expand_hostlist(node["port"]) == [str(17001 + i) for i in range(nodes)]

    assert [p["partitionname"] for p in partitions] == ["debug", "sweep"]
    assert all(p["nodes"] == "ALL" for p in partitions)
    assert partitions[1]["preemptmode"] == "REQUEUE"
    assert int(partitions[0]["prioritytier"]) > int(partitions[1]["prioritytier"])


def test_every_slurm_path_is_under_the_state_directory():
    """Nothing points at /etc/slurm or /run/munge: the cluster never touches a Slurm
    installation it did not make (the blank in the root makes conf_records cut the value;
    the raw lines are checked instead)."""
    text = render.slurm_conf(ClusterSpec(healthcheck=True), machine())
    for key in (
        "StateSaveLocation",
        "SlurmdSpoolDir",
        "SlurmctldPidFile",
        "SlurmdPidFile",
        "SlurmctldLogFile",
        "SlurmdLogFile",
        "Prolog",
        "Epilog",
        "HealthCheckProgram",
        "AccountingStoragePass",
    ):
        (line,) = [ln for ln in text.splitlines() if ln.startswith(key + "=")]
        assert line.startswith(f"{key}={ROOT}/"), line
    assert f"AuthInfo=cred_expire=10,socket={ROOT}/munge/munge.socket.2\n" in text


@pytest.mark.parametrize(
    ("healthcheck", "program", "present"), [(False, None, False), (True, None, True), (False, "/x/hc", True)]
)
def test_health_check_lines_only_when_asked_for(healthcheck, program, present):
    spec = ClusterSpec(healthcheck=healthcheck, healthcheck_program=program, healthcheck_interval=17)
    settings, _, _ = parse_slurm_conf(render.slurm_conf(spec, machine(root=Path("/srv/dc"))))
    # Prolog= and Epilog= are always the wrappers (fault injection); the health check is optional
    assert settings["prolog"] == "/srv/dc/hooks/prolog" and settings["epilog"] == "/srv/dc/hooks/epilog"
    if present:
        assert settings["healthcheckprogram"] == "/srv/dc/hooks/healthcheck"
        assert (settings["healthcheckinterval"], settings["healthchecknodestate"]) == ("17", "ANY")
    else:
        assert not {"healthcheckprogram", "healthcheckinterval", "healthchecknodestate"} & set(settings)


@pytest.mark.parametrize("nodes", NODES)
@pytest.mark.parametrize(("gpu_type", "gpus"), [("h100", 8), ("", 4), ("a100", 1)])
def test_gres_conf_gives_each_node_its_own_fake_gpus(nodes, gpu_type, gpus):
    spec = ClusterSpec(nodes=nodes, gpus_per_node=gpus, gpu_type=gpu_type)
    root = Path("/srv/dc")
    got = records(render.gres_conf(spec, root))
    assert [r["nodename"] for r in got] == spec.node_names
    for r in got:
        assert r["name"] == "gpu" and r.get("type") == (gpu_type or None)
        files = expand_hostlist(r["file"])
        assert files == [f"/srv/dc/fakegpu/{r['nodename']}/nvidia{i}" for i in range(gpus)]
        # what the cluster makes as devices is what gres.conf names
        assert files == [str(render.fake_gpu_dir(root, r["nodename"]) / f"nvidia{i}") for i in range(gpus)]
    # gres.conf and slurm.conf's node line agree on the count and type
    _, (node,), _ = parse_slurm_conf(render.slurm_conf(spec, machine(root=root)))
    assert gpus_from_gres(node["gres"]) == {gpu_type: gpus}


def test_cgroup_conf_confines_devices_on_cgroup_v1():
    spec = ClusterSpec()
    (conf,) = [{k: v for r in records(render.cgroup_conf(spec)) for k, v in r.items()}]
    assert len(records(render.cgroup_conf(spec))) == len(conf)  # one key a line, none twice
    assert conf == {
        "cgroupplugin": "cgroup/v1",
        "constraindevices": "yes",
        # config_overrides advertises cores and memory the machine lacks: never constrain them
        "constraincores": "no",
        "constrainramspace": "no",
        "constrainswapspace": "no",
    }


@pytest.mark.parametrize("nodes", NODES)
def test_job_container_conf_gives_each_node_its_own_base_path(nodes):
    spec = ClusterSpec(nodes=nodes)
    got = records(render.job_container_conf(spec, Path("/srv/dc")))
    assert [r["nodename"] for r in got] == spec.node_names
    assert [r["basepath"] for r in got] == [f"/srv/dc/jobcontainer/{n}" for n in spec.node_names]
    assert all(r["autobasepath"] == "true" for r in got)


def test_slurmdbd_conf_agrees_with_slurm_conf():
    root = Path("/srv/dc")
    dbd = {k: v for r in records(render.slurmdbd_conf(root, "s3cret")) for k, v in r.items()}
    settings, _, _ = parse_slurm_conf(render.slurm_conf(ClusterSpec(), machine(root=root)))
    assert dbd["storagepass"] == "s3cret" and dbd["storageuser"] == "slurm"
    assert dbd["storagetype"] == "accounting_storage/mysql"
    assert dbd["dbdport"] == settings["accountingstorageport"] == "16819"
    assert (dbd["storagehost"], dbd["storageport"]) == ("127.0.0.1", "16306")
    assert dbd["authinfo"] == "socket=/srv/dc/munge/munge.socket.2"
    assert settings["accountingstoragepass"] == "/srv/dc/munge/munge.socket.2"
    assert dbd["pidfile"] == "/srv/dc/run/slurmdbd.pid"


def test_the_slurmkit_config_is_a_valid_site_config():
    text = render.slurmkit_config(Path("/srv/dc"))
    cfg = SiteConfig(load_yaml_text(text, "slurmkit.yaml"), None).validate_all()
    assert cfg["health"]["backend"] == "simulated"
    assert cfg["health"]["simulated_fixture"] == "/srv/dc/gpu/{node}.yaml"
    assert cfg["paths"]["state_dir"] == "/srv/dc/slurmkit/state"
    assert cfg["paths"]["shared_dir"] == "/srv/dc/shared/verdicts"
    assert cfg["submit"]["checkpoint_root"] == "/srv/dc/shared/checkpoints"


@pytest.mark.parametrize("release", RELEASES)
def test_config_files_names_modes_and_owners(release):
    files = render.config_files(ClusterSpec(), machine(release), "pw", {"prolog": None})
    got = {f.rel: (f.mode, f.owner) for f in files}
    assert got == {
        "etc/slurm.conf": (0o644, None),
        "etc/gres.conf": (0o644, None),
        "etc/cgroup.conf": (0o644, None),
        "etc/job_container.conf": (0o644, None),
        "etc/slurmdbd.conf": (0o600, "slurm"),  # slurmdbd refuses it otherwise; it holds a password
        "slurmkit.yaml": (0o644, None),
        "hooks/prolog": (0o755, None),
        "hooks/epilog": (0o755, None),
        "hooks/healthcheck": (0o755, None),
    }
    # each file is the one its own renderer makes
    text = {f.rel: f.text for f in files}
    assert text["etc/slurm.conf"] == render.slurm_conf(ClusterSpec(), machine(release))
    assert "StoragePass=pw\n" in text["etc/slurmdbd.conf"]


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        (ClusterSpec(), {"prolog": None, "epilog": None, "healthcheck": None}),
        (
            ClusterSpec(hooks=True),
            {
                "prolog": f"{REPO}/prolog/slurmkit-prolog",
                "epilog": f"{REPO}/epilog/slurmkit-epilog",
                "healthcheck": None,
            },
        ),
        (
            ClusterSpec(hooks=True, healthcheck=True),
            {
                "prolog": f"{REPO}/prolog/slurmkit-prolog",
                "epilog": f"{REPO}/epilog/slurmkit-epilog",
                "healthcheck": f"{REPO}/prolog/slurmkit-healthcheck",
            },
        ),
        (
            ClusterSpec(prolog="/x/p", healthcheck_program="/x/h"),
            {"prolog": "/x/p", "epilog": None, "healthcheck": "/x/h"},
        ),
    ],
)
def test_the_hook_programs_run_only_with_hooks_on(spec, want):
    targets = render.hook_targets(spec, REPO)
    assert targets == want
    files = {f.rel: f.text for f in render.config_files(spec, machine(), "pw", targets)}
    for name, target in want.items():
        last = files[f"hooks/{name}"].rstrip("\n").splitlines()[-1]
        if target is None:
            assert last == "exit 0" and "slurmkit-" not in files[f"hooks/{name}"]
        else:
            assert last.startswith("exec ") and target in last


def test_a_hook_wrapper_runs_its_program_with_the_cluster_environment(tmp_path):
    root = tmp_path / "state dir"
    (root / "hooks").mkdir(parents=True)
    program = tmp_path / "the program.py"
    program.write_text(
        "import os, sys\n"
        "print(repr(sys.argv[1:]))\n"
        "for k in ('SLURM_CONF', 'SLURMKIT_CONFIG', 'PATH'):\n"
        "    print(os.environ[k])\n"
    )
    spec = ClusterSpec(python=sys.executable)
    wrapper = root / "hooks" / "prolog"
    wrapper.write_text(render.hook_wrapper(spec, root, "prolog", str(program)))
    wrapper.chmod(0o755)
    # slurmd runs hooks with an empty environment
    res = subprocess.run([str(wrapper), "a b", "c"], env={}, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    argv, conf, config, path = res.stdout.splitlines()
    assert argv == repr(["a b", "c"])
    assert (conf, config) == (f"{root}/etc/slurm.conf", f"{root}/slurmkit.yaml")
    assert path.split(":")[0] == os.path.dirname(sys.executable) and "/usr/sbin" in path.split(":")


def test_hook_wrapper_is_valid_sh_and_injects_failures(tmp_path):
    (tmp_path / "hooks").mkdir()
    script = tmp_path / "hooks" / "prolog"
    script.write_text(render.hook_wrapper(ClusterSpec(), tmp_path, "prolog", None))
    script.chmod(0o755)
    env = {"SLURMD_NODENAME": "node2"}
    assert subprocess.run([str(script)], env=env).returncode == 0
    (tmp_path / "hooks" / "fail-prolog-node2").write_text("7")
    res = subprocess.run([str(script)], env=env, capture_output=True, text=True)
    assert res.returncode == 7 and "injected prolog failure" in res.stderr
    assert subprocess.run([str(script)], env={"SLURMD_NODENAME": "node1"}).returncode == 0


def test_hosts_file_replaces_only_its_own_lines():
    current = "127.0.0.1 localhost\n10.77.0.11 node1 # slurmkit-devcluster\n10.77.0.99 gone # slurmkit-devcluster\n::1 ip6\n"
    assert render.hosts_file(current, ClusterSpec(nodes=2)) == (
        "127.0.0.1 localhost\n::1 ip6\n"
        "10.77.0.11 node1 # slurmkit-devcluster\n10.77.0.12 node2 # slurmkit-devcluster\n"
    )
    assert render.hosts_file(current, None) == "127.0.0.1 localhost\n::1 ip6\n"


def test_the_accounting_sql_grants_the_slurm_user_its_database():
    sql = render.accounting_db_sql("pw1")
    assert sql.count("IDENTIFIED BY 'pw1'") == 2
    assert "CREATE DATABASE IF NOT EXISTS slurm_acct_db;" in sql and sql.endswith("FLUSH PRIVILEGES;")


def test_rendering_neither_runs_commands_nor_touches_files(tmp_path):
    """render.py imports nothing that runs a program or writes a file, and rendering into a
    state directory that does not exist leaves it absent."""
    tree = ast.parse(Path(render.__file__).read_text())
    imported = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported[node.module] += 1
    allowed = {"__future__", "os", "shlex", "sys", "dataclasses", "pathlib", "typing", "jinja2"}
    assert set(imported) - allowed == {"slurmkit.devcluster.releases"}
    root = tmp_path / "absent"
    render.config_files(
        ClusterSpec(hooks=True), machine(root=root), "pw", render.hook_targets(ClusterSpec(), REPO)
    )
    assert not root.exists()
