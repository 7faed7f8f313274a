"""GPU-hour usage reports from sacct: who used the GPUs, what it cost, what was lost.

Pipeline (each stage is a module, none imports matplotlib or pandas):

* :mod:`.window`: the report period (``--since/--until``, ``--month``, ``--last``);
* :mod:`.sacct`: the sacct command line and the streaming row parser that turns
  ``--parsable2`` text into :class:`~.sacct.Attempt` tuples (job rows only, each
  requeued attempt separately, clipped to the window);
* :mod:`.lost`: which attempts count as lost GPU-hours, and the join with
  slurmkit's health log (jobs that ran on a node shortly before it was drained);
* :mod:`.aggregate`: group-by (user, account, partition, gpu_type, node, day,
  week, month) with time and node splitting;
* :mod:`.cost`: prices, capacity and the build-versus-rent calculator;
* :mod:`.render` and :mod:`.plot`: table/CSV/JSON/Markdown and charts.

The arithmetic is documented with worked examples in ``docs/report.md``.
"""

# Output choices, here rather than in .render so that ``slurmkit report --help`` builds
# its options without importing the pipeline (render -> aggregate -> sacct ...).
VIEWS = ("usage", "states", "lost")
FORMATS = ("table", "csv", "json", "markdown")
#: ``slurmkit report efficiency``: its groupings and the default idle threshold (percent)
EFFICIENCY_BY = ("job", "user", "account", "partition")
DEFAULT_IDLE_BELOW = 10.0
