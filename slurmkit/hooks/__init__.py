"""The node-side programs that act at job boundaries, above the checks in :mod:`slurmkit.health`.

* :mod:`.gate`: Prolog, Epilog and HealthCheckProgram as functions returning an exit code
  (the console scripts and the copied files in ``prolog/``, ``epilog/`` reach it through
  :mod:`slurmkit.cli.hooks`);
* :mod:`.epilog`: what the epilog does besides the fast checks (leftovers, GPU memory,
  ``/dev/shm``, escalation);
* :mod:`.efficiency`: per-job GPU efficiency collected by the epilog, merged across nodes
  and written to the job's AdminComment (the codec: :mod:`slurmkit.slurm.admincomment`);
* :mod:`.leaks`: the cron leak killer (``slurmkit kill-leaks``);
* :mod:`.nodeops`: ``slurmkit node status|resume``, the guarded resume;
* :mod:`.procs`: processes, job scoping by Slurm's cgroup layout, killing with grace.
"""
