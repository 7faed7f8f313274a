"""Site config and schema validation: file, line and key path in every error."""

import pytest

from slurmkit.config import load_site_config
from slurmkit.core.schema import Field, Section, deep_merge, parse_set_option, to_json_schema, validate
from slurmkit.core.yamlload import load_yaml_text
from slurmkit.errors import ConfigError

SCHEMA = Section(
    {
        "name": Field("str", "job", nullable=False),
        "nodes": Field("int", 1, min=1),
        "ratio": Field("float", 0.5, min=0, max=1),
        "fabric": Field("str", "auto", choices=["auto", "infiniband"]),
        "env": Field("dict", {}, items=Field("str")),
        "requeue": Section({"max_retries": Field("int", 3, min=0)}),
    }
)


def test_defaults_fill_in():
    out = validate(load_yaml_text("nodes: 2\n"), SCHEMA)
    assert out == {
        "name": "job",
        "nodes": 2,
        "ratio": 0.5,
        "fabric": "auto",
        "env": {},
        "requeue": {"max_retries": 3},
    }


def test_unknown_key_lists_valid_keys_with_line():
    data = load_yaml_text("nodes: 2\nrequeue:\n  max_retries: 1\n  maxretries: 2\n", "spec.yaml")
    with pytest.raises(ConfigError) as exc:
        validate(data, SCHEMA, "spec.yaml")
    assert str(exc.value) == "spec.yaml:4: requeue: unknown key 'maxretries'; valid keys: max_retries"


@pytest.mark.parametrize(
    "text,line,fragment",
    [
        ("nodes: -1\n", 1, "nodes: must be >= 1, got -1"),
        ("name: x\nnodes: two\n", 2, "nodes: expected an integer, got a string 'two'"),
        ("ratio: 2\n", 1, "ratio: must be <= 1"),
        ("fabric: ib\n", 1, "fabric: must be one of auto, infiniband"),
        ("env:\n  A: [1]\n", 2, "env.A: expected a string, got a list"),
        ("nodes: true\n", 1, "expected an integer, got a boolean"),
    ],
)
def test_type_and_range_errors(text, line, fragment):
    with pytest.raises(ConfigError) as exc:
        validate(load_yaml_text(text, "f.yaml"), SCHEMA, "f.yaml")
    assert str(exc.value).startswith(f"f.yaml:{line}: ")
    assert fragment in str(exc.value)


def test_malformed_yaml_is_one_line_with_position():
    with pytest.raises(ConfigError) as exc:
        load_yaml_text("a: [1, 2\nb: 3\n", "bad.yaml")
    assert str(exc.value).startswith("bad.yaml:") and "invalid YAML" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_duplicate_keys_are_rejected():
    with pytest.raises(ConfigError, match="dup.yaml:2: duplicate key 'a'"):
        load_yaml_text("a: 1\na: 2\n", "dup.yaml")


def test_set_option_and_merge():
    merged = deep_merge(
        load_yaml_text("nodes: 2\nrequeue: {max_retries: 1}\n"), parse_set_option("requeue.max_retries=5")
    )
    assert validate(merged, SCHEMA)["requeue"]["max_retries"] == 5
    assert parse_set_option("env.MSG=hello world") == {"env": {"MSG": "hello world"}}
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_set_option("novalue")


def test_json_schema_export():
    js = to_json_schema(SCHEMA, title="t")
    assert js["properties"]["nodes"]["minimum"] == 1
    assert js["additionalProperties"] is False
    assert js["properties"]["requeue"]["properties"]["max_retries"]["default"] == 3


def test_site_config_unknown_section(tmp_path, monkeypatch):
    cfg = tmp_path / "slurmkit.yaml"
    cfg.write_text("slurm:\n  timeout: 10\nslurmm: {}\n")
    with pytest.raises(ConfigError) as exc:
        load_site_config(str(cfg))
    assert f"{cfg}:3:" in str(exc.value) and "valid sections:" in str(exc.value)


def test_site_config_env_var_and_defaults(tmp_path, monkeypatch):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("slurm:\n  timeout: 7\n")
    monkeypatch.setenv("SLURMKIT_CONFIG", str(cfg))
    loaded = load_site_config()
    assert loaded.path == str(cfg)
    assert loaded.section("slurm")["timeout"] == 7.0
    assert loaded.section("paths")["state_dir"] == "/var/lib/slurmkit"


def test_site_config_bad_value_names_file_line_key(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("paths:\n  state_dir: /x\nslurm:\n  timeout: 0\n")
    with pytest.raises(ConfigError) as exc:
        load_site_config(str(cfg)).section("slurm")
    assert str(exc.value) == f"{cfg}:4: slurm.timeout: must be >= 1, got 0.0"


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_site_config(str(tmp_path / "nope.yaml"))
