"""The hooks' validated config, cached in a root-only file keyed by the config file's identity:
a job start parses no YAML while the config is unchanged; a changed config is read again; a
planted or user-owned cache entry is ignored (and counted as an untrusted file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from slurmkit.config import load_hook_sections
from slurmkit.core import cache, trust, yamlload
from slurmkit.errors import ConfigError

CONFIG = "slurm:\n  timeout: 30\nhealth:\n  drain_on_fail: true\n"


@pytest.fixture
def setup(tmp_path, monkeypatch):
    config = tmp_path / "slurmkit.yaml"
    config.write_text(CONFIG)
    directory = tmp_path / "cache"
    monkeypatch.setenv(cache.DIR_ENV, str(directory))
    monkeypatch.setenv("SLURMKIT_CONFIG", str(config))
    trust.REJECTED.clear()
    return config, directory


def entry(directory, config):
    return cache.entry_path(str(directory), "config-health-paths-slurm", str(config))


def no_yaml(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the YAML was parsed")

    monkeypatch.setattr(yamlload, "load_yaml_text", refuse)


def test_second_load_comes_from_the_cache(setup, monkeypatch):
    config, directory = setup
    first = load_hook_sections()
    assert first["slurm"]["timeout"] == 30.0 and first["health"]["drain_on_fail"] is True
    path = entry(directory, config)
    st = os.stat(path)
    assert (st.st_mode & 0o777) == 0o600 and (os.stat(directory).st_mode & 0o777) == 0o700
    no_yaml(monkeypatch)
    assert load_hook_sections() == first


def test_a_changed_config_is_read_again(setup, monkeypatch):
    config, directory = setup
    load_hook_sections()
    # same size, same inode, rewritten in place: the CRC and the times still differ
    with open(config, "r+") as fh:
        fh.write(CONFIG.replace("timeout: 30", "timeout: 40"))
    assert load_hook_sections()["slurm"]["timeout"] == 40.0
    no_yaml(monkeypatch)
    assert load_hook_sections()["slurm"]["timeout"] == 40.0  # and that is cached in turn


def test_a_new_slurmkit_version_reads_again(setup, monkeypatch):
    load_hook_sections()
    monkeypatch.setattr(cache, "__version__", "99.0")
    no_yaml(monkeypatch)
    with pytest.raises(AssertionError, match="YAML was parsed"):
        load_hook_sections()


def _forge(directory, config, owner=None, mode=0o600):
    """An entry with the right key whose data turns drain_on_fail off."""
    load_hook_sections()
    path = entry(directory, config)
    doc = json.loads(open(path).read())
    doc["data"]["health"]["drain_on_fail"] = False
    os.unlink(path)
    with open(path, "w") as fh:
        json.dump(doc, fh)
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner, owner)
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the entry to another account")
def test_a_user_owned_entry_is_ignored(setup):
    config, directory = setup
    path = _forge(directory, config, owner=65534)
    trust.REJECTED.clear()
    assert load_hook_sections()["health"]["drain_on_fail"] is True
    assert [p for p, _ in trust.REJECTED] == [path]


def test_an_entry_others_may_write_is_ignored(setup):
    config, directory = setup
    path = _forge(directory, config, mode=0o666)
    trust.REJECTED.clear()
    assert load_hook_sections()["health"]["drain_on_fail"] is True
    assert [p for p, _ in trust.REJECTED] == [path]


def test_the_control_a_trusted_entry_is_believed(setup):
    """The forged entries above differ from this one only in owner or mode."""
    config, directory = setup
    _forge(directory, config)
    assert load_hook_sections()["health"]["drain_on_fail"] is False


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory to another account")
def test_an_untrusted_cache_directory_is_neither_read_nor_written(setup):
    config, directory = setup
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)
    assert load_hook_sections()["slurm"]["timeout"] == 30.0
    assert os.listdir(directory) == []


def test_an_untrusted_config_is_refused_whatever_the_cache(setup):
    config, _ = setup
    load_hook_sections()
    os.chmod(config, 0o666)
    with pytest.raises(ConfigError, match="not trusted"):
        load_hook_sections()


def test_a_job_start_with_a_warm_cache_imports_no_yaml(setup):
    config, directory = setup
    code = "import sys\nfrom slurmkit.config import load_hook_sections\nload_hook_sections()\nprint('yaml' in sys.modules)\n"
    env = {"SLURMKIT_CONFIG": str(config), cache.DIR_ENV: str(directory), "PATH": "/usr/bin:/bin"}
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        for _ in range(2)
    ]
    assert [r.stdout.strip() for r in runs] == ["True", "False"], [r.stderr for r in runs]


def test_the_checksum_is_stable_and_sees_a_same_size_rewrite():
    """The key's checksum (the bytes as a number modulo a prime): the same in every process
    (no per-process hash seed), and different after an in-place edit of the same size."""
    assert cache.checksum(b"") == 0 and cache.checksum(b"\x01\x02") == 0x0201
    assert cache.checksum(b"\xff" * 8) == (2**64 - 1) % cache._PRIME
    text = b"health:\n  fail_closed: false\n" * 50
    flipped = text.replace(b"false", b"fals3", 1)
    assert len(flipped) == len(text) and cache.checksum(flipped) != cache.checksum(text)
    swapped = text[:10] + text[11:12] + text[10:11] + text[12:]  # two bytes exchanged
    assert cache.checksum(swapped) != cache.checksum(text)
    assert cache.checksum(text + b"\0") == cache.checksum(text)  # trailing NULs: the key's size differs


@pytest.mark.parametrize("apart", [61, 122, 61 * 7])
def test_the_checksum_sees_an_edit_of_two_bytes_61_apart(apart):
    """Modulo 2**61 - 1, 256**61 is 1: bytes 61 (122, ...) apart counted alike, so a same-size
    rewrite that exchanges them, or raises one digit and lowers the other (min 80 -> 90,
    max 95 -> 85), kept the checksum, and a cache entry for the old file matched the new one."""
    text = bytearray(b"health:\n  checks:\n" + b"#" * 1000)
    text[100], text[100 + apart] = ord("8"), ord("9")
    swapped = bytearray(text)
    swapped[100], swapped[100 + apart] = ord("9"), ord("8")
    assert cache.checksum(bytes(swapped)) != cache.checksum(bytes(text))
    st = os.stat(__file__)
    assert cache.identity(st, bytes(swapped)) != cache.identity(st, bytes(text))


def test_no_two_places_of_a_file_count_alike():
    """The order of 256 modulo the checksum's prime is far beyond any file's size (so no
    structured same-size edit, only chance, keeps the checksum)."""
    p = cache._PRIME
    assert p < 2**64 and p > 2**56  # a 7-byte change always changes it; 16 hex digits in the tag
    assert pow(256, (p - 1) // 2, p) == 1 and all(pow(256, k, p) != 1 for k in (1, 2, 61, 122, 1 << 20))
