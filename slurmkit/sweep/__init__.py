"""Cron node sweeps: preemptible deep checks on idle nodes.

The pieces, each usable on its own:

* :mod:`slurmkit.verdict.store`: the per-node verdict store on shared storage, read by
  the prolog (cached heavy verdicts), ``ssubmit`` (requeue-with-exclude) and reports;
* :mod:`slurmkit.sweep.planner`: which idle nodes to check next (pure, benchmarked);
* :mod:`slurmkit.sweep.outliers`: fleet-relative median/MAD per GPU model;
* :mod:`slurmkit.sweep.probes`: checkpoint-storage throughput and pairwise selection;
* :mod:`slurmkit.sweep.notify`: de-duplicated notifications;
* :mod:`slurmkit.sweep.runnode`: what runs inside one sweep job on the node;
* :mod:`slurmkit.sweep.cron`: one cron run (plan and submit), fleet status, invalidation;
* :mod:`slurmkit.cli.sweep`: ``slurmkit sweep``, a thin click wrapper over :mod:`.cron`.
"""
