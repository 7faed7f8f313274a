"""``python -m slurmkit.devcluster.inroot up|down STATE_DIR SPEC_JSON``: the devcluster's
own steps, run by ``up``/``down`` inside a Slurm release's root (``rootfs.py``), where that
root's packages are this machine's. Not a user command: use ``slurmkit devcluster``."""

from __future__ import annotations

import json
import sys

from slurmkit.devcluster.cluster import ClusterSpec, DevCluster
from slurmkit.errors import DevclusterError


def main(argv: list) -> int:
    if len(argv) != 3 or argv[0] not in ("up", "down"):
        print("usage: python -m slurmkit.devcluster.inroot up|down STATE_DIR SPEC_JSON", file=sys.stderr)
        return 2
    verb, state_dir, spec_json = argv
    cluster = DevCluster(state_dir)
    try:
        if verb == "up":
            known = set(ClusterSpec.__dataclass_fields__)
            spec = ClusterSpec(**{k: v for k, v in json.loads(spec_json).items() if k in known})
            cluster.up(spec)
        else:
            cluster.down(keep_state=True)
    except DevclusterError as exc:
        print(f"devcluster: {exc}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
