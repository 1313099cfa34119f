"""Scenario 8: a Redis primary fails over while the API, a sweeper and a consumer run (issue 26).

Three runs of the failover harness (``support.failover``), shortened from the issue's (the failover 8 s
into 200 jobs/s, 12 s more, then the drain), each asserting the contract's "Failover and durability":

- a cluster master SIGKILLed with Redis' defaults: no loop exits, no 500, nothing lost, nothing early;
  the partitions on the other masters keep being delivered (a gap of at most 1.5 s: the time the
  cluster itself answers CLUSTERDOWN, plus a look), the loops log state changes, not every failed
  call, and the consumer backs off instead of spinning;
- a primary and its replica 50 ms behind, promoted: no loop exits, no 500, nothing early, nothing
  left unsettled; creates acknowledged within the lag before the kill may be lost (printed);
- the same with ``DELAYQ_MIN_REPLICAS=1``: no acknowledged create is lost.

Every job carries one of ``FLOW_KEYS`` flow keys, each held to ``support.failover.KEY_CONCURRENCY`` jobs
at once: once drained, no lease is counted against any key (a take and its key's count are one Lua
call, so a promoted replica has both or neither).

Each prints its row (and appends it to the fault tier's report).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.failover import Row, run_scenario
from support.faults import FUNCTIONS, report

KILL_AFTER_S = 8.0
AFTER_S = 12.0
IDLE_S = 3.0
DRAIN_TIMEOUT_S = 20.0
HEALTHY_GAP_S = 1.5
WARNINGS_PER_LOOP = 60
FLOW_KEYS = 20


def run(setup: str, workdir: Path) -> Row:
    row = run_scenario(
        setup,
        kill_after_s=KILL_AFTER_S,
        after_s=AFTER_S,
        functions=FUNCTIONS,
        workdir=workdir,
        idle_s=IDLE_S,
        drain_timeout_s=DRAIN_TIMEOUT_S,
        keys=FLOW_KEYS,
    )
    report(row.line())
    report(f"[faults]   top warnings: {row.top_warnings}")
    return row


@pytest.mark.fault
@pytest.mark.timeout(150)
def test_a_cluster_master_killed(tmp_path: Path) -> None:
    row = run("cluster", tmp_path)
    cpu = row.consumer_cpu
    report(f"[faults]   consumer CPU (cores): idle {cpu['idle']}, steady {cpu['steady']}, outage {cpu['outage']}")
    assert row.loop_exits == {}
    assert row.answers_500 == 0
    assert row.lost == 0, row.undelivered_in_redis
    assert row.early == 0
    assert row.keys_counted == {}
    assert row.healthy_gap_s is not None
    assert row.healthy_gap_s <= HEALTHY_GAP_S, f"partitions 1 and 2 stalled {row.healthy_gap_s} s"
    assert all(n <= WARNINGS_PER_LOOP for n in row.warnings.values()), row.top_warnings
    assert cpu["steady"] is not None
    assert cpu["outage"] is not None
    assert cpu["outage"] <= 2 * cpu["steady"], cpu


@pytest.mark.fault
@pytest.mark.timeout(150)
def test_a_lagging_replica_promoted(tmp_path: Path) -> None:
    row = run("pair-lag", tmp_path)
    report(f"[faults]   acknowledged creates lost in the replication lag: {row.lost}")
    assert row.loop_exits == {}
    assert row.answers_500 == 0
    assert row.early == 0
    assert row.drained, row.stuck
    assert row.stuck == {}
    assert row.keys_counted == {}
    assert row.locks_without_ttl == 0


@pytest.mark.fault
@pytest.mark.timeout(150)
def test_a_lagging_replica_promoted_with_min_replicas(tmp_path: Path) -> None:
    row = run("pair-lag-min-replicas", tmp_path)
    assert row.loop_exits == {}
    assert row.answers_500 == 0
    assert row.early == 0
    assert row.lost == 0, f"{row.lost} acknowledged creates lost; undelivered in Redis: {row.undelivered_in_redis}"
    assert row.undelivered_in_redis == {}
    assert row.keys_counted == {}
