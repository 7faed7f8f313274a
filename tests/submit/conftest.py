"""Fixtures for the ssubmit tests (helpers live in ssubmit_helpers.py, a unique module name)."""

from ssubmit_helpers import write_spec  # noqa: F401  (pytest fixture)
