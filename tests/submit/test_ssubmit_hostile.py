"""Property tests: random hostile strings render to valid bash and survive exactly.

Each example renders a spec whose name, env values, args and checkpoint directory are
drawn from all of Unicode (minus NUL, which no argv or environment can hold), checks
``bash -n``, then *runs* the script with stub srun/scontrol/python and compares what
bash hands to torchrun and to the environment with the spec's values.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ssubmit_helpers import render_dict, run_with_stubs

from slurmkit.core.yamlload import load_yaml_text
from slurmkit.submit.spec import validate_spec

HOSTILE_BITS = [
    "$(id)",
    "`id`",
    "'",
    '"',
    "\\",
    "\n",
    ";",
    "&&",
    "|",
    "$HOME",
    "${X:-y}",
    "!",
    "#",
    "*",
    "~",
    " ",
    "\t",
    "%j",
    "{job_id}",
    "ü",
    "\u2028",
    "\r",
    "--",
    "-x",
    "=",
    ">",
    "<",
]
text = st.lists(
    st.one_of(
        st.sampled_from(HOSTILE_BITS),
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8),
    ),
    max_size=6,
).map("".join)
env_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: (
        not n.startswith(("SLURM", "SK_", "BASH", "PATH", "TMPDIR", "HOME"))
        and n
        not in {
            "IFS",
            "PWD",
            "OLDPWD",
            "SHELLOPTS",
            "PS4",
            "UID",
            "EUID",
            "PPID",
            "SHLVL",
            "_",
            "OPTIND",
            "OPTARG",
            "RANDOM",
            "LINENO",
            "SECONDS",
            "HISTCMD",
            "GROUPS",
            "FUNCNAME",
            "PIPESTATUS",
            "HOSTNAME",
            "MACHTYPE",
            "OSTYPE",
            "HOSTTYPE",
            "EPOCHREALTIME",
            "EPOCHSECONDS",
            "SRANDOM",
            "COLUMNS",
            "LINES",
            "BASHPID",
            "LANG",
            "LC_ALL",
            "LC_CTYPE",
            "POSIXLY_CORRECT",
            "ENV",
            "CDPATH",
            "GLOBIGNORE",
            "TMOUT",
            "MAIL",
            "MAILPATH",
            "MAILCHECK",
            "PROMPT_COMMAND",
            "TERM",
            "SHELL",
            "HISTFILE",
            "INPUTRC",
            "PS1",
            "PS2",
            "PS3",
            "FIGNORE",
            "HISTSIZE",
            "HISTFILESIZE",
            "HISTCONTROL",
            "HISTIGNORE",
            "OPTERR",
            "COMP_WORDBREAKS",
            "READLINE_LINE",
            "EXECIGNORE",
            "BASHOPTS",
            "COPROC",
            "DIRSTACK",
            "BASH_ENV",
        }
    )
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=text,
    env=st.dictionaries(env_names, text, max_size=4),
    args=st.lists(text, max_size=5),
    ckpt=text.map(lambda s: s.replace("/", "_")),
)
def test_hostile_values_are_inert_and_preserved(name, env, args, ckpt):
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        ckpt_dir = f"{tmp}/ck{ckpt}/{{job_id}}"
        spec, rendered = render_dict(
            {
                "name": name,
                "env": env,
                "args": args,
                "script": "/opt/t r/train.py",
                "checkpoint": {"dir": ckpt_dir},
                "preflight": {"allreduce": False},
            }
        )
        check = subprocess.run(
            ["bash", "-n"], input=rendered.script, capture_output=True, text=True, timeout=10
        )
        assert check.returncode == 0, check.stderr
        # The job name travels either as a plain #SBATCH line or as one sbatch argv item.
        assert (
            f"#SBATCH --job-name={name}\n" in rendered.script or f"--job-name={name}" in rendered.sbatch_args
        )
        result = run_with_stubs(rendered.script, tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.torchrun_argv[-(len(args) + 1) :] == ["/opt/t r/train.py", *args]
        assert result.env["SLURMKIT_JOB_NAME"] == name
        for key, value in env.items():
            assert result.env[key] == value
        assert result.env["SLURMKIT_CHECKPOINT_DIR"] == ckpt_dir.replace("{job_id}", "4242")


@settings(max_examples=40, deadline=None)
@given(value=text)
def test_hostile_values_round_trip_through_the_yaml_file(value):
    """What a user writes in the YAML file is what reaches the spec (then the script).

    The document is written with escapes for non-ASCII: PyYAML writes a raw U+0085 (NEL)
    that its own reader then folds into a space, a YAML line-break rule, not ours.
    """
    doc = yaml.safe_dump({"script": "/t.py", "name": value, "env": {"V": value}, "args": [value]})
    spec = validate_spec(load_yaml_text(doc, "s.yaml"), "s.yaml")
    assert spec["name"] == value and spec["env"]["V"] == value and spec["args"] == [value]
