"""Where slurmkit's data files are: the example configs and tables under ``etc/`` and
the sbatch templates under ``job_templates/``.

In a source checkout (and an editable install) they are read from the tree, so an
edit takes effect at once. A wheel installs them under ``<prefix>/share/slurmkit/``
(``[tool.setuptools.data-files]`` in pyproject.toml); :func:`data_path` finds either.
"""

from __future__ import annotations

import sys
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[1]
INSTALLED_ROOT = Path(sys.prefix) / "share" / "slurmkit"


def data_path(*parts: str) -> Path:
    """``data_path("etc", "nccl")``: the source tree's copy when present, else the installed one."""
    source = SOURCE_ROOT.joinpath(*parts)
    if source.exists():
        return source
    return INSTALLED_ROOT.joinpath(*parts)
