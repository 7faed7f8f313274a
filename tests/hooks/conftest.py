"""Fixtures for the hook programs' unit tests (slurmkit.hooks): the health tests' own, shared
from tests/health/conftest.py: a simulated GPU fixture per test, a site config in a temp
dir, a check context, a fake ``scontrol`` that records its arguments, reaping of spawned
processes, and the hooks' cache under the test's directory (autouse)."""

from tests.health.conftest import (  # noqa: F401  (pytest finds the fixtures by name here)
    ctx_factory,
    fake_scontrol,
    gpu_fixture,
    hook_cache_in_tmp,
    reap,
    site,
)
