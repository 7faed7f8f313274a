"""GPU-hour usage reports from sacct: who used the GPUs, what it cost, what was lost.

A report's flow goes down once and returns once: ``cli/report.py`` parses the options and
calls :mod:`.source`, the one source layer, which opens a saved dump (header, delimiter,
``--sacct-columns``, stdin), calls sacct, chooses the archive, the DuckDB engine or the
reference for usage, lost, capacity, efficiency and ingest, and returns the report with its
warnings for the CLI to print (:mod:`.progress` shows long reads on a terminal).

The reference path (each stage a module; the rules are defined in their docstrings):

* :mod:`.window`: the report period (``--since/--until``, ``--month``, ``--last``);
* :mod:`.sacct`: the sacct command line and its one caller, the one dump reader, the one
  time parser for data (job states come from :mod:`slurmkit.slurm.states`), and the
  streaming row parser that turns
  ``--parsable2`` text into :class:`~.sacct.Attempt` tuples (job rows only, each
  requeued attempt separately, clipped to the window);
* :mod:`.lost`: which attempts count as lost GPU-hours, and the join with
  slurmkit's health log (jobs that ran on a node shortly before it was drained);
* :mod:`.aggregate`: group-by (user, account, partition, gpu_type, node, day,
  week, month) with time and node splitting;
* :mod:`.cost` and :mod:`.capacity`: prices, the share of available GPU-hours used and
  the build-versus-rent calculator.

The same answer, other ways: :mod:`.stream` aggregates each attempt as it is parsed
(bounded memory), :mod:`.engine` does it in DuckDB (the ``[report]`` extra, through
:mod:`.duck`), and :mod:`.archive` keeps the sacct rows as monthly Parquet files stamped
with the rules' version (:mod:`.rules`). :mod:`.efficiency` finds the jobs that held GPUs
they did not use (the epilog's summary in AdminComment, Slurm's GPU usage TRES). Output: :mod:`.render` and the one table renderer
:mod:`.table` (every cell through :mod:`.neutral`); charts in :mod:`.plot` and
:mod:`.efficiency`, the only modules that import matplotlib (the ``[plot]`` extra), and
only when a chart is asked for. None imports pandas.

The arithmetic is documented with worked examples in ``docs/report.md``.
"""

# Output choices, here rather than in .render so that ``slurmkit report --help`` builds
# its options without importing the pipeline (render -> aggregate -> sacct ...).
VIEWS = ("usage", "states", "lost")
FORMATS = ("table", "csv", "json", "markdown")
#: ``slurmkit report efficiency``: its groupings and the default idle threshold (percent)
EFFICIENCY_BY = ("job", "user", "account", "partition")
DEFAULT_IDLE_BELOW = 10.0
