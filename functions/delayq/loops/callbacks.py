"""The sweep's part for callbacks: in a partition whose outbox holds records (the sweep call says how
many), it makes each record's callback job, in the callback topic's partition for the job's new id
(``calls.callbacks``, one call per partition, records in their order), then drops the records from
the outbox by number (``calls.outbox_trim``). A sweeper that dies between the two sends the records
again, and each partition skips what it made before: so a record's job id (and so its partition) is
fixed by the record, ``<outcome>-p<partition>-<number>``. Why: docs/how-it-works.md's "Callbacks"."""

from __future__ import annotations

import json
import logging
from collections import defaultdict

from delayq.core.callbacks import Record
from delayq.store import calls
from delayq.store.calls import CallbackJob
from delayq.store.keys import Partition
from delayq.store.namespace import Namespace

log = logging.getLogger("delayq.sweep")

DRAIN_LIMIT = 500  # records read, and jobs made, per partition and pass


def drain(namespace: Namespace, partition: Partition, limit: int = DRAIN_LIMIT) -> int:
    """Makes the callback jobs of up to ``limit`` of the partition's outbox records, oldest first, and
    drops those records. How many records were drained."""
    raw = namespace.redis.lrange(partition.outbox, 0, limit - 1)
    if not raw:
        return 0
    records = [Record.decode(str(text)) for text in raw]  # the client decodes replies: str already
    by_partition: dict[Partition, list[CallbackJob]] = defaultdict(list)
    for record in records:
        job_id = f"{record.outcome}-p{partition.index}-{record.seq}"
        body = json.dumps(record.job_body(), separators=(",", ":"), ensure_ascii=False)
        job = CallbackJob(record.target, record.seq, job_id, record.key, body)
        by_partition[namespace.keys.for_job(record.target, job_id)].append(job)
    made = 0
    for target, jobs in by_partition.items():
        made += calls.callbacks(target, partition, jobs).run(namespace.redis)
    calls.outbox_trim(partition, records[-1].seq).run(namespace.redis)
    log.debug("partition %d: %d callback jobs made of %d records", partition.index, made, len(records))
    return len(records)
