"""API Gateway (a REST API, or an HTTP API with payload 1.0 or 2.0) -> the HTTP API of delayq. The
routes live in ``delayq.surfaces.api.routes``; the payload format is read per event (``delayq.surfaces.gateway``)."""

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.logging import correlation_paths

from delayq.core.observability import Telemetry, route_logs_to
from delayq.store.queue import Queue
from delayq.surfaces.api import create_app

logger = Logger()
tracer = Tracer()
telemetry = Telemetry()
route_logs_to(logger)
app = create_app(lambda: Queue(telemetry=telemetry))  # its own DELAYQ_TOPICS, as the loops


# requestContext.requestId: where both payload formats carry the request's id.
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@tracer.capture_lambda_handler
@telemetry.flushed
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
