"""schemathesis against the app's own ``GET /openapi.json``, in-process: the schema is loaded from the
real handler through ``support.hostile.wsgi_app`` (each HTTP request becomes the API Gateway event the
local stack builds), and every generated request, schema-valid and schema-violating, is sent the same
way, without a network.

Checks: never a server error; every status code is documented for its operation; every body matches
the documented schema of its status; the content type is the documented one; a request that violates
the schema is refused (4xx; 413 for a batch over 1000 jobs). ``POST /jobs/batch`` answers each job on
its own: a batch whose jobs violate the schema is a 200 that refuses at least one of them. Plus
delayq's own: every error is ``{"status", "error", "field", "message"}`` with the HTTP status.
"""

from __future__ import annotations

import schemathesis
from schemathesis import Case, GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.parameters import ParameterLocation

from support.hostile import HOSTILE_SCHEMA, Hostile, strict_json, wsgi_app

schema = schemathesis.openapi.from_wsgi("/openapi.json", wsgi_app)
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
rejection = schema.config.checks.negative_data_rejection
rejection.expected_statuses = [*rejection.expected_statuses, "413"]  # a batch over 1000 jobs is too large
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance, content_type_conformance]
BATCH = "/jobs/batch"  # answers each job on its own: not negative_data_rejection, ``refused_some`` below
ERROR_KEYS = {"status", "error", "field", "message"}


@schema.parametrize()
@HOSTILE_SCHEMA
def test_operation(case: Case, api: Hostile):
    response = case.call()
    batch = case.operation.path == BATCH
    case.validate_response(response, checks=CHECKS if batch else [*CHECKS, negative_data_rejection])
    if batch and response.status_code == 200 and body_mode(case) == GenerationMode.NEGATIVE:
        results = strict_json(response.text)["results"]
        assert any(result["status"] != 201 for result in results), f"a negative batch, all written: {case.body!r}"
    if case.method.upper() != "GET":  # whatever was asked and answered, nothing half-written
        api.jobs()  # (a GET that wrote would be seen by the next check, at the latest at the end)
    if response.status_code >= 400:
        error = strict_json(response.text)
        assert set(error) == ERROR_KEYS, error
        assert error["status"] == response.status_code, error


def body_mode(case: Case) -> GenerationMode | None:
    """Whether the body of ``case`` is valid per the schema (positive) or not (negative)."""
    body = case.meta.components.get(ParameterLocation.BODY) if case.meta else None
    return body.mode if body else None


def test_the_schema_has_every_route():
    operations = {f"{op.method.upper()} {op.path}" for op in (result.ok() for result in schema.get_all_operations())}
    assert operations == {
        "POST /jobs",
        "POST /topics/{topic}/jobs",
        "POST /jobs/batch",
        "PUT /jobs/{topic}/{id}",
        "GET /jobs/{topic}/{id}",
        "PATCH /jobs/{topic}/{id}",
        "POST /jobs/{topic}/{id}/run",
        "DELETE /jobs/{topic}/{id}",
        "GET /topics/{topic}",
        "GET /topics/{topic}/dead",
        "GET /topics/{topic}/dead/errors",
        "POST /topics/{topic}/dead/replay",
        "DELETE /topics/{topic}/dead",
        "PUT /schedules/{topic}/{name}",
        "GET /schedules/{topic}/{name}",
        "DELETE /schedules/{topic}/{name}",
        "GET /schedules",
        "GET /health",
        "GET /topics",
        "GET /topics/{topic}/jobs",
        "GET /topics/{topic}/forecast",
        "GET /topics/{topic}/history",
        "POST /topics/{topic}/pause",
        "POST /topics/{topic}/resume",
        "DELETE /topics/{topic}/jobs",
        "GET /topics/{topic}/keys",
        "GET /topics/{topic}/keys/{key}",
        "PUT /topics/{topic}/keys/{key}",
        "DELETE /topics/{topic}/keys/{key}",
    }
