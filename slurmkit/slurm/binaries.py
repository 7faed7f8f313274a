"""Where the Slurm binaries are and how long one call may take: the site config's ``slurm``
section, applied once per process (:func:`configure`) and read by :mod:`slurmkit.slurm.client`.

Kept apart from the client so that a hook can apply the settings without importing the
process machinery (``subprocess``) on a path that runs no Slurm command.

Binaries are looked up in ``slurm.bin_dir`` of the site config, then ``$PATH``, then
``/usr/bin``, ``/usr/local/bin`` and ``/opt/slurm/bin``: Slurm's prolog and epilog run with
no ``PATH`` at all.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Optional

#: Seconds before any single Slurm command is killed, unless the config says otherwise.
DEFAULT_TIMEOUT = 30.0
FALLBACK_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin")

_bin_dir: Optional[str] = None
_timeout: float = DEFAULT_TIMEOUT


def configure(bin_dir: Optional[str] = None, timeout: Optional[float] = None) -> None:
    """Apply the site config's ``slurm`` section."""
    global _bin_dir, _timeout
    _bin_dir = bin_dir
    if timeout:
        _timeout = float(timeout)


def timeout() -> float:
    """The configured seconds for one Slurm call."""
    return _timeout


def binary(name: str) -> str:
    """Absolute path of a Slurm binary, or the bare name when it cannot be found
    (the runner then reports 'command not found' naming it)."""
    if _bin_dir:
        return os.path.join(_bin_dir, name)
    import shutil  # only when there is no bin_dir to use

    found = shutil.which(name)
    if found:
        return found
    for d in FALLBACK_DIRS:
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return name
