"""The version of the report's rules whose outputs the accounting archive stores.

The archive keeps what rules computed at ingest: in each month file the typed columns
(``start_s``, ``end_s``, ``submit_s``: the time rule; ``gpus``: the AllocTRES rule;
``jid_i``, ``state_n``; which rows are kept at all: the malformed and impossible rules), and
in ``_multi.parquet`` each requeued job's attempt order (``tie_rank``) and prolog-requeue
flags (``pflag``, ``lflag``). A report over an archive written under another version must
not answer with the old rules silently: ``_multi.parquet`` of another version is not used
(the engine recomputes order and flags from the rows), and months ingested under another
version are named in a warning (their typed columns and kept rows follow the old rules:
ingest them again).

Bump :data:`RULES_VERSION` with any change to one of those rules.

History: 1, archives written before the stamp (none is written); 2, rows whose JobID or
JobIDRaw is not sacct's are no longer kept (issue 25).
"""

from __future__ import annotations

RULES_VERSION = 2
