"""Attacks through input: job specs (written by any user) and the site config (written by
an admin, where one typo must not quietly switch the gate off).

* ``extra_sbatch`` was checked by splitting at ``=``: ``-N2``, ``--gres gpu:8``, ``-HN2``,
  abbreviations and newlines all went through. It is now parsed the way sbatch's
  getopt_long parses it, and forbidden options are refused in every spelling.
* NaN and infinity passed every ``min``/``max`` (NaN compares false): a NaN check
  timeout failed every check and drained every node, a NaN deadline disabled the gate.
* A spec that is huge, nested thousands deep, full of aliases or carries a NUL byte
  must give exit 2 and one line, quickly, never exit 70 or a hang.
* A typo in the Xid table path failed open for ever: nothing was said until the first
  Xid arrived, and then the Xid was not judged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from suite_guards import private_system_paths, private_view

from slurmkit.core.yamlload import load_yaml_text
from slurmkit.errors import ConfigError
from slurmkit.slurm import sbatch_options
from slurmkit.submit.spec import FORBIDDEN_EXTRA, validate_spec
from tests.health.conftest import REPO, site_dict

PROLOG = str(REPO / "prolog" / "slurmkit-prolog")
BASE = {"script": "/opt/train.py", "nodes": 2, "gpus_per_node": 8, "time": "01:00:00"}


def _spec(extra):
    return validate_spec(dict(BASE, extra_sbatch=extra), "spec.yaml")


# --------------------------------------------------------------- extra_sbatch

FORBIDDEN_SPELLINGS = [
    ["-N2"],
    ["-N", "2"],
    ["--nodes", "2"],
    ["--nodes=2"],
    ["-HN2"],
    ["-vN", "2"],
    ["-n8"],
    ["-n", "8"],
    ["--ntasks", "8"],
    ["--ntasks-per-n=2"],
    ["--gres", "gpu:8"],
    ["--gres=gpu:8"],
    ["--gpus-per-n", "8"],
    ["-G8"],
    ["--gpus", "16"],
    ["--sig=B:USR1@1"],
    ["--signal", "KILL"],
    ["--open-m", "truncate"],
    ["--no-requeue"],
    ["--requeue"],
    ["--wrap", "id"],
    ["--wr=id"],
    ["--reservation", "x", "-N", "3"],
    ["--exclusive", "-N2"],
    ["--exclusive"],  # all GRES of the nodes (man sbatch): GPUs only from the spec
    ["--gpus-per-socket=4"],
    ["--tres-per-task=gres/gpu:1"],
    ["-k", "-N2"],
    # not options at all: a newline would start a second #SBATCH line, a bare word is a batch script
    ["--reservation=x\n#SBATCH --nodes=9"],
    ["--comment=a\rb"],
    ["--comment=a\x00b"],
    ["evil.sh"],
    ["--"],
    # ambiguous abbreviations are refused rather than guessed
    ["--node=2"],
    ["--gre=gpu:8"],
    ["--n=3"],
]


@pytest.mark.parametrize("extra", FORBIDDEN_SPELLINGS, ids=[repr(x) for x in FORBIDDEN_SPELLINGS])
def test_forbidden_sbatch_options_are_refused_in_every_spelling(extra):
    with pytest.raises(ConfigError) as exc:
        _spec(extra)
    assert "extra_sbatch" in str(exc.value) and "\n" not in str(exc.value)


def test_allowed_options_in_any_spelling_become_one_sbatch_line_each():
    spec = _spec(["--reservation", "maint", "-w", "node1", "-vv", "--comment", "-N2", "--export=A=B,C"])
    assert spec["extra_sbatch"] == [
        "--reservation=maint",
        "--nodelist=node1",
        "--verbose",
        "--verbose",
        "--comment=-N2",
        "--export=A=B,C",
    ]
    from slurmkit.submit.render import render

    script = render(spec, site={}, paths={"shared_dir": "/shared"}).script
    assert "#SBATCH --reservation=maint\n" in script and "#SBATCH --nodelist=node1\n" in script
    assert "#SBATCH maint" not in script and "#SBATCH -w" not in script


def _sbatch_flags(script: str, argv) -> list:
    """Every option sbatch would read from the #SBATCH lines and the extra argv."""
    import shlex

    items = []
    for line in script.splitlines():
        if line.startswith("#SBATCH "):
            items.extend(shlex.split(line[len("#SBATCH ") :]))
    return [flag for flag, _ in sbatch_options.parse(items + list(argv))]


HOSTILE = [
    "-N2",
    "-N",
    "2",
    "--nodes",
    "--gres",
    "gpu:8",
    "-H",
    "-n",
    "--nod",
    "=",
    "\n",
    "\r",
    "#SBATCH",
    "--reservation",
    "x",
    "--comment",
    "--",
    "-",
    "-x",
    "node[1-2]",
    "--exclusive",
    "-k",
    "--wrap",
    "$(id)",
    "'",
    '"',
    " ",
    "\x00",
    "--sig",
    "B:USR1@1",
    "-vv",
    "--export=A=B",
]
item = st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=6)), min_size=1, max_size=4).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extra=st.lists(st.one_of(st.sampled_from(HOSTILE), item), max_size=6))
def test_hostile_extra_sbatch_is_refused_or_adds_no_managed_option(extra):
    """Whatever the items, the spec is refused (ConfigError: exit 2) or the job sbatch would
    read carries exactly ssubmit's own managed options, no more."""
    from slurmkit.submit.render import render

    try:
        spec = _spec(extra)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    rendered = render(spec, site={}, paths={"shared_dir": "/shared"})
    plain = render(_spec([]), site={}, paths={"shared_dir": "/shared"})
    managed = [f for f in _sbatch_flags(rendered.script, rendered.sbatch_args) if f in FORBIDDEN_EXTRA]
    assert managed == [f for f in _sbatch_flags(plain.script, plain.sbatch_args) if f in FORBIDDEN_EXTRA]


# --------------------------------------------------------------- NaN, infinity, negatives


def _float_paths():
    from slurmkit.config import VALID_SECTIONS, section_schema

    out = []

    def walk(field, path):
        if field.type == "section":
            for k, f in field.fields.items():
                walk(f, path + [k])
        elif field.type in ("float", "number"):
            out.append(path)

    for name in VALID_SECTIONS:
        walk(section_schema(name), [name])
    return out


def _nest(path, value):
    d = value
    for k in reversed(path):
        d = {k: d}
    return d


@pytest.mark.parametrize("bad", [".nan", ".inf", "-.inf"])
def test_every_float_in_the_site_config_refuses_nan_and_infinity(tmp_path, bad):
    from slurmkit.config import load_site_config

    paths = _float_paths()
    assert len(paths) > 30  # the walk found the schema's numbers
    accepted = []
    for path in paths:
        text = yaml.safe_dump(_nest(path, "@@")).replace("'@@'", bad)
        cfg = tmp_path / "c.yaml"
        cfg.write_text(text)
        try:
            load_site_config(str(cfg), full=True)
            accepted.append(".".join(path))
        except ConfigError as exc:
            assert ".".join(path) in str(exc), str(exc)
    assert not accepted, f"{bad} accepted for {accepted}"


@pytest.mark.parametrize(
    "doc",
    [
        "health:\n  escalation:\n    exit_signals: [-9]\n",
        "health:\n  escalation:\n    exit_codes: [-1]\n",
        "health:\n  thresholds:\n    H100: {power_warn_w: -5}\n",
        "health:\n  thresholds:\n    H100: {temperature_fail_c: -1}\n",
        "sweep:\n  pairs:\n    min_busbw_gbps: -1\n",
        "health:\n  checks:\n    disk_space:\n      paths: {/tmp: {min_free_gb: .nan}}\n",
    ],
)
def test_meaningless_values_are_refused_by_config_validate(tmp_path, doc):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(doc)
    res = subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.main", "config", "validate", "--config", str(cfg), "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def _fake_scontrol(tmp_path: Path) -> Path:
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "scontrol"
    script.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys
        with open({str(tmp_path / "scontrol-calls.jsonl")!r}, "a") as fh:
            fh.write(json.dumps(sys.argv[1:]) + "\\n")
        """)
    )
    script.chmod(0o755)
    return bindir


def _drains(tmp_path: Path):
    f = tmp_path / "scontrol-calls.jsonl"
    calls = [json.loads(x) for x in f.read_text().splitlines()] if f.exists() else []
    return [c for c in calls if c[:1] == ["update"] or c[:1] == ["reboot"]]


def test_a_nan_check_timeout_does_not_drain_a_healthy_node(tmp_path):
    """The prolog as slurmd runs it, with ``health.check_timeout: .nan`` in the site config.
    The refused config makes it record the error under the system's default paths, as a
    node's would: as root those are private to this run (:func:`private_system_paths`)."""
    data = site_dict(tmp_path)
    data["slurm"] = {"bin_dir": str(_fake_scontrol(tmp_path))}
    data["health"]["check_timeout"] = "@@"
    (tmp_path / "gpu").mkdir(exist_ok=True)
    healthy = (REPO / "etc" / "gpu-fixtures" / "healthy-h100x8.yaml").read_text()
    (tmp_path / "gpu" / "node1.yaml").write_text(healthy)
    cfg = tmp_path / "slurmkit.yaml"
    cfg.write_text(yaml.safe_dump(data).replace("'@@'", ".nan"))
    env = {
        "SLURMKIT_CONFIG": str(cfg),
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_ID": "9302",
        "SLURM_JOB_UID": "0",
        "SLURM_JOB_USER": "root",
        "SLURM_JOB_GPUS": "0,1",
    }
    argv = private_system_paths([sys.executable, PROLOG], tmp_path / "private")
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert not _drains(tmp_path), f"a NaN timeout drained a healthy node: {_drains(tmp_path)}"
    assert "check_timeout" in res.stderr  # the config error is said, in slurmd's log
    if os.geteuid() == 0:  # and recorded, in the (private) default health log
        log = private_view(tmp_path / "private", "/var/log/slurmkit/health.jsonl")
        rec = json.loads(log.read_text().splitlines()[-1])
        assert (rec["job_id"], [r["code"] for r in rec["results"]]) == ("9302", ["CONFIG_ERROR"]), rec


# --------------------------------------------------------------- hostile spec files


def _ssubmit_dry(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.ssubmit", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(path.parent),
    )


@pytest.mark.parametrize("kind", ["huge", "deep", "deep_map", "laughs", "nul"])
def test_hostile_spec_files_give_exit_2_and_one_line(tmp_path, kind):
    spec = tmp_path / "spec.yaml"
    if kind == "huge":
        spec.write_text("script: /t.py\ncomment: " + "x" * (3 << 20) + "\n")
    elif kind == "deep":
        spec.write_text("script: /t.py\nargs: " + "[" * 50000 + "]" * 50000 + "\n")
    elif kind == "deep_map":
        spec.write_text("script: /t.py\nenv: " + "{a: " * 3000 + "b" + "}" * 3000 + "\n")
    elif kind == "laughs":
        text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        for i in range(1, 9):
            text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
        spec.write_text("script: /t.py\n" + text)
    else:
        spec.write_bytes(b'script: /t.py\nname: "a\x00b"\n')
    t0 = time.monotonic()
    res = _ssubmit_dry(spec)
    assert res.returncode == 2, (res.returncode, res.stderr[-500:])
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr[-500:]
    assert str(spec) in res.stderr
    assert time.monotonic() - t0 < 30


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)
    | st.lists(
        st.sampled_from(
            [
                "[",
                "]",
                "{",
                "}",
                "&a ",
                "*a",
                ":",
                "- ",
                "\n",
                "  ",
                "!!python/object:os.system",
                ".nan",
                "-.inf",
                "\x00",
                "script: /t.py\n",
                "extra_sbatch: [",
                "-N2",
                "!!binary",
            ]
        ),
        max_size=60,
    ).map("".join)
)
def test_any_spec_text_is_accepted_or_refused_with_a_config_error(text):
    """Random and hostile spec text: parsing plus validation raises nothing but ConfigError."""
    try:
        data = load_yaml_text(text, "spec.yaml")
        if isinstance(data, dict):
            validate_spec(data, "spec.yaml")
    except ConfigError as exc:
        assert "\n" not in str(exc)


# --------------------------------------------------------------- the Xid table path


def test_config_validate_rejects_a_missing_xid_table(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("health:\n  checks:\n    xid:\n      table: /etc/slurmkit/xid-actoins.yaml\n")
    res = subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.main", "config", "validate", "--config", str(cfg), "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert "health.checks.xid.table" in res.stderr and "xid-actoins.yaml" in res.stderr
    assert f"{cfg}:4:" in res.stderr


def test_a_mistyped_xid_table_is_reported_on_every_run_and_xid_79_still_fails(tmp_path):
    typo = {"checks": {"xid": {"table": str(tmp_path / "xid-actoins.yaml")}}}
    data = site_dict(tmp_path, typo)
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    # 1) no Xid yet: the prolog passes (fail open) but says so: log line, record, metric
    res = _prolog_with(quiet, data)
    assert res.returncode == 0, res.stderr
    assert "xid-actoins.yaml" in res.stderr
    rec = [json.loads(x) for x in (quiet / "log" / "health.jsonl").read_text().splitlines()][-1]
    xid = [r for r in rec["results"] if r["check"] == "xid"][0]
    assert xid["status"] == "unknown" and xid["code"] == "CONFIG_ERROR", xid
    prom = "".join(p.read_text() for p in (quiet / "metrics").glob("*.prom"))
    assert any(
        line.startswith("slurmkit_health_internal_error{") and line.split()[-1] in ("1", "1.0")
        for line in prom.splitlines()
    ), prom
    # 2) an Xid 79 arrives: judged with the packaged table, FAIL and drain, not lost
    loud = tmp_path / "loud"
    loud.mkdir()
    data2 = site_dict(loud, {"checks": {"xid": {"table": str(tmp_path / "xid-actoins.yaml")}}})
    res = _prolog_with(
        loud, data2, [{"xid": 79, "gpu": 1, "timestamp": time.time(), "message": "fell off the bus"}]
    )
    assert res.returncode != 0, res.stderr
    assert [c for c in _drains(loud) if any("XID_79" in a for a in c)], _drains(loud)


def _prolog_with(base: Path, data: dict, xid_events=None) -> subprocess.CompletedProcess:
    fixture = yaml.safe_load((REPO / "etc" / "gpu-fixtures" / "healthy-h100x8.yaml").read_text())
    if xid_events:
        fixture["xid_events"] = xid_events
    (base / "gpu").mkdir(exist_ok=True)
    (base / "gpu" / "node1.yaml").write_text(yaml.safe_dump(fixture))
    data = json.loads(json.dumps(data))
    data["health"]["simulated_fixture"] = str(base / "gpu" / "{node}.yaml")
    data["paths"] = {k: str(base / Path(v).name) for k, v in data["paths"].items()}
    data["slurm"] = {"bin_dir": str(_fake_scontrol(base))}
    cfg = base / "slurmkit.yaml"
    cfg.write_text(yaml.safe_dump(data))
    env = {
        "SLURMKIT_CONFIG": str(cfg),
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_ID": "9303",
        "SLURM_JOB_UID": "0",
        "SLURM_JOB_USER": "root",
        "SLURM_JOB_GPUS": "0,1",
    }
    return subprocess.run([sys.executable, PROLOG], env=env, capture_output=True, text=True, timeout=120)
