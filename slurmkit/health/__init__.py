"""Node health: a catalog of checks, GPU backends, and the prolog/epilog gate.

Exit codes of the health commands are Nagios-style: 0 ok, 1 warn, 2 fail, 3 unknown.
"""
