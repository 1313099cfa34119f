"""EventBridge Scheduler, every minute -> the consume loop: per topic, due jobs are taken in batches and
handed to the topic's target with its timeout, then acknowledged, retried or dead-lettered
(``delayq.loops.consumer``)."""

from typing import Any

from aws_lambda_powertools import Logger, Tracer

from delayq.core.loop import Budget, freeze_start_up
from delayq.core.observability import Telemetry, route_logs_to
from delayq.loops.consumer import Consumer
from delayq.store.queue import Queue

logger = Logger()
tracer = Tracer()
route_logs_to(logger)
queue = Queue(telemetry=Telemetry())  # its own DELAYQ_TOPICS: never the one tools read from Redis
freeze_start_up()


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@queue.telemetry.flushed
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    budget = Budget.from_event(event, context, queue.settings.loop_seconds)
    return Consumer(queue).run(budget)
