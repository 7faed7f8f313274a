"""Parsers of Slurm's text formats: hostlists, TRES, --parsable2, durations."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkit.slurm.parse import (
    ParseError,
    compress_hostlist,
    expand_hostlist,
    format_minutes,
    gpus_from_tres,
    parse_memory_mb,
    parse_parsable2,
    parse_time_limit,
    parse_tres,
    split_parsable2,
)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("node[1-3,7]", ["node1", "node2", "node3", "node7"]),
        ("n1", ["n1"]),
        ("n1,n[4-5]", ["n1", "n4", "n5"]),
        ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
        ("a[1-2]-ib[1-2]", ["a1-ib1", "a1-ib2", "a2-ib1", "a2-ib2"]),
        ("rack1-n[1,3],rack2-n[2]", ["rack1-n1", "rack1-n3", "rack2-n2"]),
        ("", []),
        ("(null)", []),
    ],
)
def test_expand_hostlist(text, expected):
    assert expand_hostlist(text) == expected


@pytest.mark.parametrize("bad", ["node[1-", "node]1[", "node[a-b]", "node[3-1]", "n[1,,2]"])
def test_expand_hostlist_rejects_garbage(bad):
    with pytest.raises(ParseError):
        expand_hostlist(bad)


def test_compress_hostlist_examples():
    assert compress_hostlist(["node1", "node2", "node3", "node7"]) == "node[1-3,7]"
    assert compress_hostlist(["gpu01", "gpu02", "gpu04"]) == "gpu[01-02,04]"
    assert compress_hostlist(["login", "n5"]) == "login,n5"


@given(
    st.sets(st.integers(min_value=0, max_value=5000), min_size=1, max_size=60),
    st.sampled_from(["node", "gpu-a", "x"]),
)
def test_compress_then_expand_roundtrips(nums, prefix):
    names = [f"{prefix}{n}" for n in sorted(nums)]
    assert expand_hostlist(compress_hostlist(names)) == names


def test_parse_tres_typed_gpus_are_not_double_counted():
    tres = parse_tres("billing=1,cpu=1,gres/gpu:h100=2,gres/gpu=2,mem=1000M,node=1")
    assert tres["mem"] == "1000M" and tres["node"] == "1"
    assert gpus_from_tres(tres) == (2, {"h100": 2})


def test_gpus_from_tres_variants():
    assert gpus_from_tres(parse_tres("billing=4,cpu=4,gres/gpu=8,mem=4000M,node=2")) == (8, {})
    assert gpus_from_tres(parse_tres("billing=1,cpu=1,mem=1000M,node=1")) == (0, {})
    assert gpus_from_tres(parse_tres("")) == (0, {})
    # only typed keys (a site tracking gres/gpu:<type> alone): their sum is the total
    assert gpus_from_tres(parse_tres("gres/gpu:a100=2,gres/gpu:h100=4")) == (6, {"a100": 2, "h100": 4})
    # key order does not matter (scontrol uses TRES-id order)
    assert gpus_from_tres(parse_tres("cpu=1,gres/gpu=3,gres/gpu:h100=3")) == (3, {"h100": 3})


@pytest.mark.parametrize(
    "tres,expected",
    [
        # Slurm 23.02+ also tracks GPU memory and utilisation as TRES; they share the
        # "gres/gpu" prefix but are not GPUs (a count of 81920 MiB is not 81920 GPUs).
        ("cpu=8,gres/gpu=2,gres/gpumem=81920,gres/gpuutil=100,mem=64G,node=1", (2, {})),
        ("gres/gpuutil=100,gres/gpumem=81920,gres/gpu=2", (2, {})),
        ("gres/gpu:h100=2,gres/gpumem=81920,gres/gpuutil=50", (2, {"h100": 2})),
        ("cpu=8,gres/gpumem=80G,gres/gpuutil=100,mem=64G", (0, {})),
    ],
)
def test_gpu_memory_and_utilisation_tres_are_not_gpus(tres, expected):
    assert gpus_from_tres(parse_tres(tres)) == expected


@pytest.mark.parametrize("bad", ["cpu", "=3", "gres/gpu=abc", "gres/gpu=-1"])
def test_bad_tres(bad):
    with pytest.raises(ParseError):
        gpus_from_tres(parse_tres(bad))


def test_parsable2_pipe_inside_free_text_field():
    fields = ["JobID", "State", "JobName", "Elapsed"]
    assert split_parsable2("12|RUNNING|a|b|c|00:00:01", 4, free_field=2) == [
        "12",
        "RUNNING",
        "a|b|c",
        "00:00:01",
    ]
    rows = parse_parsable2(
        "JobID|State|JobName|Elapsed\n12|COMPLETED|x|y|00:01:00\n", fields, free_field="JobName", header=True
    )
    assert rows == [{"JobID": "12", "State": "COMPLETED", "JobName": "x|y", "Elapsed": "00:01:00"}]
    with pytest.raises(ParseError):
        split_parsable2("12|RUNNING", 4)


@given(st.text(alphabet=st.characters(blacklist_characters="\n\r\x1f"), max_size=30))
def test_parsable2_any_job_name_survives(name):
    line = "|".join(["77", "COMPLETED", name, "00:00:09"])
    assert split_parsable2(line, 4, free_field=2) == ["77", "COMPLETED", name, "00:00:09"]


@pytest.mark.parametrize(
    "text,minutes",
    [
        ("30", 30),
        ("30:30", 31),
        ("2:00:00", 120),
        ("1-0", 1440),
        ("1-2:30", 1590),
        ("1-02:30:01", 1591),
        ("UNLIMITED", None),
        ("infinite", None),
    ],
)
def test_parse_time_limit(text, minutes):
    assert parse_time_limit(text) == minutes


@pytest.mark.parametrize("bad", ["", "1h", "-5", "1-2:3:4:5", "two days"])
def test_parse_time_limit_rejects(bad):
    with pytest.raises(ParseError, match="bad time limit"):
        parse_time_limit(bad)


def test_format_minutes():
    assert format_minutes(90) == "01:30:00"
    assert format_minutes(1590) == "1-02:30:00"
    assert format_minutes(None) == "UNLIMITED"


def test_gpus_from_gres():
    from slurmkit.slurm.parse import gpus_from_gres

    assert gpus_from_gres("gpu:h100:8(S:0-1)") == {"h100": 8}
    assert gpus_from_gres("gpu:8") == {"": 8}
    assert gpus_from_gres("gpu:8", untyped="untyped") == {"untyped": 8}
    assert gpus_from_gres("gpu:h100:4,gpu:a100:2(S:1)") == {"h100": 4, "a100": 2}
    assert gpus_from_gres("shard:4,gpu:h100:2") == {"h100": 2}
    assert gpus_from_gres("(null)") == {} and gpus_from_gres("") == {}


def test_parse_memory_mb():
    assert parse_memory_mb("1000M") == 1000
    assert parse_memory_mb("62.50G") == 64000
    assert parse_memory_mb("1T") == 1024 * 1024
    with pytest.raises(ParseError):
        parse_memory_mb("lots")


def test_conf_records_one_tokenizer_for_slurm_config_files():
    from slurmkit.slurm.parse import conf_records

    text = (
        "# gres.conf\nNodeName=n[1-2] Name=gpu File=/dev/nvidia[0-3]  # four\n\n  AutoDetect=nvml\nnonsense\n"
    )
    assert list(conf_records(text)) == [
        (2, {"nodename": "n[1-2]", "name": "gpu", "file": "/dev/nvidia[0-3]"}),
        (4, {"autodetect": "nvml"}),
        (5, {}),
    ]
