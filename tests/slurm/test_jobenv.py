"""One reader of Slurm's job environment, and one rule for "this node"."""

from __future__ import annotations

import os

import pytest

from slurmkit.slurm.jobenv import DEFAULT_SLURM_CONF, JobEnv, is_this_node, this_node


def test_every_field_from_slurms_names():
    env = {
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_UID": "1001",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_GPUS": "0,2",
        "SLURMD_NODENAME": "node7",
        "SLURM_NODELIST": "node[7-8]",
        "SLURM_JOB_START_TIME": "1764662400",
        "SLURM_ARRAY_JOB_ID": "42",
        "SLURM_ARRAY_TASK_ID": "3",
        "SLURM_JOB_RESTART_COUNT": "2",
        "SLURM_CONF": "/etc/slurm-test/slurm.conf",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": "0",
    }
    job = JobEnv.from_env(env)
    assert job == JobEnv(
        job_id="42",
        job_uid=1001,
        job_user="alice",
        job_gpus="0,2",
        node_name="node7",
        nodelist="node[7-8]",
        start_time=1764662400.0,
        array_job_id="42",
        array_task_id="3",
        restart_count=2,
        slurm_conf="/etc/slurm-test/slurm.conf",
        procid=1,
        ntasks=2,
        localid=0,
    )
    assert job.job_ref == "42_3"  # the array's first task: its raw id names the whole array
    assert job.conf_file("gres.conf") == "/etc/slurm-test/gres.conf"


def test_older_and_other_context_spellings():
    job = JobEnv.from_env({"SLURM_JOBID": "7", "SLURM_JOB_NODELIST": "n1"})
    assert (job.job_id, job.nodelist, job.job_ref) == ("7", "n1", "7")
    both = JobEnv.from_env({"SLURM_NODELIST": "a", "SLURM_JOB_NODELIST": "b"})
    assert both.nodelist == "a"  # the epilog's own spelling wins


@pytest.mark.parametrize("bad", ["", "x", "-1", "1.5", "nan", "inf", "12a"])
def test_bad_numbers_read_as_unset(bad):
    job = JobEnv.from_env(
        {
            "SLURM_JOB_UID": bad,
            "SLURM_JOB_RESTART_COUNT": bad,
            "SLURM_PROCID": bad,
            "SLURM_JOB_START_TIME": bad,
        }
    )
    assert job.job_uid is None and job.restart_count is None and job.procid is None
    if bad not in ("-1", "1.5"):
        assert job.start_time is None


def test_empty_environment_as_slurmd_gives_it():
    job = JobEnv.from_env({})
    assert job == JobEnv() and job.conf_path == DEFAULT_SLURM_CONF and job.job_ref is None


def test_array_task_other_than_the_first_keeps_its_own_id():
    job = JobEnv.from_env({"SLURM_JOB_ID": "45", "SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_ID": "3"})
    assert job.job_ref == "45"


def test_this_node_is_slurmd_nodename_else_the_short_hostname(monkeypatch):
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(("Linux", "gpu1.example.org", "r", "v", "m")))
    assert this_node({"SLURMD_NODENAME": "node2"}) == "node2"
    assert this_node({}) == "gpu1"


def test_is_this_node_rule(monkeypatch):
    """Slurm's NodeName is SLURMD_NODENAME when slurmd gives one (two slurmd on one host:
    the hostname names neither); else slurmd matches the full hostname or the short one."""
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(("Linux", "gpu1.example.org", "r", "v", "m")))
    assert is_this_node("gpu1", {}) and is_this_node("gpu1.example.org", {})
    assert not is_this_node("gpu2", {}) and not is_this_node("", {}) and not is_this_node("gpu1.example", {})
    assert is_this_node("node2", {"SLURMD_NODENAME": "node2"})
    assert not is_this_node("gpu1", {"SLURMD_NODENAME": "node2"})
    assert not is_this_node("gpu1.example.org", {"SLURMD_NODENAME": "node2"})
