"""The Slurm access layer.

Every call to a Slurm command goes through :func:`slurmkit.slurm.runner.run`, which
enforces a timeout and turns failures into :class:`~slurmkit.errors.SlurmCommandError`.
:mod:`slurmkit.slurm.parse` holds the pure parsers (hostlists, TRES, ``--parsable2``,
elapsed times), and :mod:`slurmkit.slurm.client` the narrow typed API the rest of
slurmkit uses. A pyslurm backend could implement the same client API later without
touching its callers (pyslurm has no release for Slurm 22.05 on the package index).
"""
