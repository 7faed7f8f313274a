"""``slurmkit devcluster``: a real Slurm cluster on one machine, from Debian's packages.

munge, MariaDB, slurmdbd, slurmctld and several slurmd run as ordinary daemons with
every file (configs, spool, logs, pid files, the munge key and socket, the MariaDB
data directory) under one state directory, on non-default ports, so the cluster never
touches a Slurm installation it did not create. See :mod:`.cluster`.
"""
