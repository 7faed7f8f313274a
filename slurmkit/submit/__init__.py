"""ssubmit: one YAML job spec in, a correct multi-node torchrun job on Slurm out.

Layout (core first, then the parts that touch Slurm or run inside the job):

* :mod:`.spec` - the job-spec schema, loading, merging of site defaults and
  ``--set`` overrides, validation (including checks against ``sinfo``);
* :mod:`.nccl` - NCCL profiles per fabric and the sysfs InfiniBand port detection;
* :mod:`.render` - Jinja2 rendering of the sbatch script (StrictUndefined, every
  value through ``shquote``);
* :mod:`.jobside` - small commands the rendered script runs inside the job
  (head-node resolution, per-node launch, fabric agreement, requeue with exclude);
* :mod:`.preflight` - the torch.distributed all_reduce pre-flight (imports torch
  lazily; only the job's Python needs torch).
* :mod:`.follow` - following a submitted job: its state (squeue, then sacct), the
  ``--wait`` polling loop and its exit code, ``logs --follow``.

Nothing in :mod:`.spec`, :mod:`.nccl` or :mod:`.render` spawns a process.
"""
