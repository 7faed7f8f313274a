"""The Slurm releases the devcluster runs, and what differs between them.

``host`` is the release of this machine's Debian packages (Debian 12 ships 22.05, Debian 13
24.11). The others come from Debian's own packages in a root filesystem built with
``debootstrap`` from the named suite (``rootfs.py``). Only what truly differs between
releases is here; everything else in the configuration is the same on every release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional


@dataclass(frozen=True)
class Release:
    """One Slurm release line (major.minor) and the Debian suite that ships it."""

    name: str
    suite: str
    #: slurm.conf key and plugin for a private /tmp and /dev/shm per job. Slurm 25.11 renamed
    #: the job_container plugins to namespace plugins (``NamespaceType=namespace/tmpfs``); the
    #: configuration file keeps its name, job_container.conf.
    container_key: str = "JobContainerType"
    container_plugin: str = "job_container/tmpfs"


RELEASES: Dict[str, Release] = {
    "22.05": Release("22.05", "bookworm"),
    "24.11": Release("24.11", "trixie"),
    "26.05": Release("26.05", "sid", container_key="NamespaceType", container_plugin="namespace/tmpfs"),
}
#: Debian major version -> the Slurm release its own packages carry.
DEBIAN_RELEASES = {"12": "22.05", "13": "24.11"}

_VERSION = re.compile(r"\b(\d+)\.(\d+)\.\d+")


def parse_version(text: str) -> Optional[str]:
    """``slurm-wlm 22.05.8`` (``slurmd -V``) -> ``22.05``; ``None`` when there is no version."""
    m = _VERSION.search(text)
    return f"{int(m.group(1)):02d}.{int(m.group(2)):02d}" if m else None


def debian_release(debian_version: str = "/etc/debian_version") -> Optional[str]:
    """The Slurm release of this machine's Debian (``12.11`` -> 22.05), ``None`` if unknown."""
    try:
        major = Path(debian_version).read_text().strip().split(".")[0]
    except OSError:
        return None
    return DEBIAN_RELEASES.get(major)


def get(name: str) -> Release:
    """The :class:`Release` for ``22.05``-style ``name``; an unknown one is a clear error."""
    try:
        return RELEASES[name]
    except KeyError:
        raise KeyError(f"unknown Slurm release {name!r}; known: {', '.join(RELEASES)}") from None
