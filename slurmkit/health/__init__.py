"""Node health: the check framework, the checks (fast and heavy, Xid, the collective probe)
and the GPU backends. The programs that run them at job boundaries are in :mod:`slurmkit.hooks`.

Exit codes of the health commands are Nagios-style: 0 ok, 1 warn, 2 fail, 3 unknown.
"""
