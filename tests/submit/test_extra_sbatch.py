"""``extra_sbatch``, the spec's escape hatch, pinned without the devcluster (issue 30).

sbatch reads its options with getopt_long (slurmkit/slurm/sbatch_options.py), so a node
count can hide in ``-N2``, ``-N 2``, ``--nodes 2``, ``--nod=2`` or a bundle such as ``-HN2``;
every one of them is refused, naming ``--nodes`` and the spec key ``nodes``. An ``#SBATCH``
line ends at a newline and a bash line too, so no item or value may carry one (or any
control character): that is refused at load, with one line naming the file, line and key.
What is allowed but cannot be written safely into an ``#SBATCH`` line (a blank, ``$``, a
quote, a non-ASCII line separator) travels as one sbatch argv item instead, never in the
script. The security suite (tests/security/test_attack_inputs.py) fuzzes the same rules.
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys

import pytest
from ssubmit_helpers import TEST_PATHS, make_site

from slurmkit.errors import ConfigError
from slurmkit.submit.render import render
from slurmkit.submit.spec import load_spec


def _load(write_spec, extra, nodes=None):
    text = "script: /t.py\n" + (f"nodes: {nodes}\n" if nodes else "") + f"extra_sbatch: {json.dumps(extra)}\n"
    return load_spec(str(write_spec(text)))


def _render(spec):
    return render(spec, site=make_site(), paths=TEST_PATHS, spec_path="train.yaml")


def _error(write_spec, extra):
    with pytest.raises(ConfigError) as exc:
        _load(write_spec, extra)
    assert exc.value.exit_code == 2
    msg = str(exc.value)
    assert "\n" not in msg and "\r" not in msg
    assert "train.yaml:2: extra_sbatch" in msg, msg
    return msg


def _sbatch_lines(script):
    return re.findall(r"^#SBATCH (.*)$", script, re.M)


# ------------------------------------------------------------------ a node count in any spelling

NODE_SPELLINGS = [
    ["-N2"],
    ["-N", "2"],
    ["--nodes=2"],
    ["--nodes", "2"],
    ["--nodes=0-1"],
    ["-HN2"],  # --hold, then -N with its value in the same item
    ["-vvN", "2"],
    ["-HN", "2"],
    ["--reservation", "x", "-N", "3"],  # after an option with a separate value
    ["-k", "-N2"],  # -k's argument is optional: -N2 is the next option, not its value
    ["--exclusive=user", "--nodes=1-4"],
]


@pytest.mark.parametrize("extra", NODE_SPELLINGS, ids=[" ".join(x) for x in NODE_SPELLINGS])
def test_a_node_count_in_any_spelling_is_refused(write_spec, extra):
    msg = _error(write_spec, extra)
    if extra[0].startswith("--exclusive"):  # refused for --exclusive first, in item order
        assert "may not set --exclusive," in msg
        return
    assert "may not set --nodes, in any spelling" in msg and "set nodes instead" in msg, msg


@pytest.mark.parametrize(
    "extra,value",
    [
        (["--comment", "-N2"], "--comment=-N2"),  # a value that looks like an option is a value
        (["--comment=-N2"], "--comment=-N2"),
        (["-J-N2"], "--job-name=-N2"),  # -J takes the rest of its item
        (["-J", "--nodes=9"], "--job-name=--nodes=9"),
    ],
)
def test_a_node_option_inside_a_value_is_only_that_value(write_spec, extra, value):
    spec = _load(write_spec, extra, nodes=3)
    assert spec["extra_sbatch"] == [value]
    rendered = _render(spec)
    lines = _sbatch_lines(rendered.script)
    assert [x for x in lines if x.startswith("--nodes")] == ["--nodes=3"]
    assert lines[-1] == value and rendered.sbatch_args == []


@pytest.mark.parametrize("extra", [["--no=2"], ["--nod=2"], ["--node", "2"]], ids=lambda x: " ".join(x))
def test_an_abbreviation_of_nodes_is_ambiguous(write_spec, extra):
    """--nod and --node abbreviate --nodefile and --nodelist too: getopt_long calls them
    ambiguous, and so does the spec (refused either way)."""
    name = extra[0].split("=")[0]
    msg = _error(write_spec, extra)
    assert f"{name} is ambiguous" in msg and "--nodelist, --nodes" in msg, msg


def test_a_node_option_without_its_value_is_refused(write_spec):
    assert "-N (--nodes) needs a value" in _error(write_spec, ["-N"])
    assert "--nodes needs a value" in _error(write_spec, ["--nodes"])


# ------------------------------------------------------------------ newlines and control characters

SMUGGLE = "x\n#SBATCH --nodes=64"
NEWLINES = [
    ([f"--comment={SMUGGLE}"], "contains a newline"),  # in a long option's own item
    (["--comment", SMUGGLE], "value 'x\\n#SBATCH --nodes=64' of --comment contains a newline"),
    (["-w", "node1\nid"], "value 'node1\\nid' of -w contains a newline"),  # a short option's next item
    ([f"-w{SMUGGLE}"], "contains a newline"),  # inside a short option's own item
    (["--hold\n#SBATCH --nodes=64"], "contains a newline"),
    (["--nice", SMUGGLE], "contains a newline"),  # an optional argument's next item is an option
    (["--comment=x\r#SBATCH --nodes=64"], "contains a newline or control character"),
    (["--comment=x\x00y"], "contains a NUL character"),  # refused by the spec loader first
    (["--comment", "x\x1by"], "contains a newline or control character"),
    (["--comment", "x\ty"], "contains a newline or control character"),
    (["--comment=x\x7f"], "contains a newline or control character"),
    (["--reservation=maint", "--comment", "ok\n"], "of --comment contains a newline"),
]


@pytest.mark.parametrize("extra,says", NEWLINES, ids=[repr(x[0]) for x in NEWLINES])
def test_a_newline_or_control_character_is_refused_at_load(write_spec, extra, says):
    assert says in _error(write_spec, extra)


def test_ssubmit_refuses_a_smuggled_sbatch_line_with_exit_2_and_one_line(write_spec):
    path = write_spec(f"script: /t.py\nextra_sbatch: {json.dumps(['--comment', SMUGGLE])}\n")
    res = subprocess.run(
        [sys.executable, "-m", "slurmkit.cli.ssubmit", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "train.yaml:2: extra_sbatch" in res.stderr and "#SBATCH" not in res.stdout


UNSAFE = [
    "a b",  # sbatch splits an #SBATCH line at blanks
    "$(id)",
    "`id`;id",
    "x'y\"z",
    "a\u2028#SBATCH --nodes=64",  # line separators other than \n: Python's, not bash's or sbatch's
    "a\x85b",
    "x#y",
]


@pytest.mark.parametrize("value", UNSAFE, ids=[repr(v) for v in UNSAFE])
def test_a_value_not_safe_in_an_sbatch_line_travels_on_argv(write_spec, value):
    spec = _load(write_spec, ["--comment", value, "--reservation=maint"], nodes=2)
    assert spec["extra_sbatch"] == [f"--comment={value}", "--reservation=maint"]
    rendered = _render(spec)
    assert rendered.sbatch_args == [f"--comment={value}"]
    script = rendered.script
    # the value adds one comment line to the script and nothing else
    plain = _render(dict(spec, extra_sbatch=["--reservation=maint"])).script.split("\n")
    diff = [d for d in difflib.ndiff(plain, script.split("\n")) if d[0] in "+-"]
    assert diff == [
        "+ # --comment is passed on the sbatch command line: its value cannot be written in an #SBATCH line."
    ]
    lines = _sbatch_lines(script)
    assert lines[-1] == "--reservation=maint"
    assert [x for x in lines if x.startswith("--nodes")] == ["--nodes=2"]
    assert all(re.fullmatch(r"--[a-z-]+(=\S+)?", x) for x in lines), lines
    # no line separator of any kind reached the script
    assert not re.search("[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]", script)
    check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=10)
    assert check.returncode == 0, check.stderr
