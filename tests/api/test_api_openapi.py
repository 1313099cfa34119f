"""``GET /openapi.json``: a valid OpenAPI 3 document of the contract's routes and models."""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any

import openapi_spec_validator
import pytest
import redis

import delayq
from delayq.core.models import MAX_BATCH

from support.api import Api

# The contract's routes (CONTRACT.md, "HTTP API"), parameters normalised to {}.
CONTRACT_ROUTES: dict[str, set[str]] = {
    "/jobs": {"post"},
    "/jobs/batch": {"post"},
    "/topics/{}/jobs": {"post", "get", "delete"},
    "/jobs/{}/{}": {"put", "get", "patch", "delete"},
    "/topics/{}": {"get"},
    "/topics/{}/dead": {"get", "delete"},
    "/topics/{}/dead/replay": {"post"},
    "/schedules/{}/{}": {"put", "get", "delete"},
    "/schedules": {"get"},
    "/health": {"get"},
    # "Seeing and steering a queue"
    "/topics": {"get"},
    "/topics/{}/forecast": {"get"},
    "/topics/{}/pause": {"post"},
    "/topics/{}/resume": {"post"},
}
# What each route answers on success, and the model documented for it.
SUCCESS_MODELS: dict[tuple[str, str], dict[str, str | None]] = {
    ("/jobs", "post"): {"201": "ScheduledOut"},
    ("/jobs/batch", "post"): {"200": "BatchOut"},
    ("/topics/{}/jobs", "post"): {"201": "ScheduledOut"},
    ("/jobs/{}/{}", "put"): {"201": "ScheduledOut", "200": "ScheduledOut"},
    ("/jobs/{}/{}", "get"): {"200": "JobOut"},
    ("/jobs/{}/{}", "patch"): {"200": "ScheduledOut"},
    ("/jobs/{}/{}", "delete"): {"204": None},
    ("/topics/{}", "get"): {"200": "TopicOut"},
    ("/topics/{}/dead", "get"): {"200": "DeadListOut"},
    ("/topics/{}/dead/replay", "post"): {"200": "ReplayedOut"},
    ("/topics/{}/dead", "delete"): {"200": "PurgedOut"},
    ("/schedules/{}/{}", "put"): {"201": "ScheduleOut", "200": "ScheduleOut"},
    ("/schedules/{}/{}", "get"): {"200": "ScheduleOut"},
    ("/schedules/{}/{}", "delete"): {"204": None},
    ("/schedules", "get"): {"200": "ScheduleListOut"},
    ("/health", "get"): {"200": "HealthOut"},
    ("/topics", "get"): {"200": "TopicPageOut"},
    ("/topics/{}/jobs", "get"): {"200": "JobPageOut"},
    ("/topics/{}/forecast", "get"): {"200": "ForecastOut"},
    ("/topics/{}/pause", "post"): {"200": "PausedOut"},
    ("/topics/{}/resume", "post"): {"200": "PausedOut"},
    ("/topics/{}/jobs", "delete"): {"200": "CancelledOut"},
}
# Errors the contract names for a route (all may answer 503).
CONTRACT_ERRORS: dict[tuple[str, str], set[str]] = {
    ("/jobs", "post"): {"400", "409", "413", "422", "503"},
    ("/jobs/batch", "post"): {"400", "413", "422", "503"},
    ("/topics/{}/jobs", "post"): {"400", "404", "409", "413", "422", "503"},
    ("/jobs/{}/{}", "put"): {"400", "404", "409", "413", "422", "503"},
    ("/jobs/{}/{}", "get"): {"404", "422", "503"},
    ("/jobs/{}/{}", "patch"): {"400", "404", "409", "422", "503"},
    ("/jobs/{}/{}", "delete"): {"404", "422", "503"},
    ("/topics/{}", "get"): {"404", "422", "503"},
    ("/topics/{}/dead", "get"): {"422", "503"},
    ("/topics/{}/dead/replay", "post"): {"400", "422", "503"},
    ("/topics/{}/dead", "delete"): {"422", "503"},
    ("/schedules/{}/{}", "put"): {"400", "404", "413", "422", "503"},
    ("/schedules/{}/{}", "get"): {"404", "422", "503"},
    ("/schedules/{}/{}", "delete"): {"404", "422", "503"},
    ("/schedules", "get"): {"422", "503"},
    ("/health", "get"): {"503"},
    ("/topics", "get"): {"422", "503"},
    ("/topics/{}/jobs", "get"): {"404", "422", "503"},
    ("/topics/{}/forecast", "get"): {"404", "422", "503"},
    ("/topics/{}/pause", "post"): {"404", "422", "503"},
    ("/topics/{}/resume", "post"): {"404", "422", "503"},
    ("/topics/{}/jobs", "delete"): {"404", "422", "503"},
}
METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def normalise(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


@pytest.fixture
def doc(api: Api) -> dict[str, Any]:
    reply = api.get("/openapi.json")
    assert reply.status == 200, reply
    assert isinstance(reply.json, dict)
    return reply.json


def operations(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (normalise(path), method): op
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in METHODS
    }


def schema_ref(response: dict[str, Any]) -> str | None:
    schema = response.get("content", {}).get("application/json", {}).get("schema")
    if not schema:
        return None
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[1] if ref else f"<inline {schema}>"


def test_document_is_openapi_3(doc: dict[str, Any]):
    assert re.match(r"^3\.\d+\.\d+$", doc["openapi"]), doc["openapi"]
    assert doc["info"]["title"]
    assert doc["info"]["version"]


def test_document_is_valid_per_openapi_spec_validator(doc: dict[str, Any]):
    openapi_spec_validator.validate(doc)


def test_every_contract_route_is_documented_with_its_methods(doc: dict[str, Any]):
    documented: dict[str, set[str]] = {}
    for path, item in doc["paths"].items():
        documented.setdefault(normalise(path), set()).update(m for m in item if m in METHODS)
    for path, methods in CONTRACT_ROUTES.items():
        assert path in documented, (path, sorted(documented))
        assert methods <= documented[path], (path, documented[path])


def test_path_parameters_are_declared(doc: dict[str, Any]):
    for path, item in doc["paths"].items():
        names = set(re.findall(r"\{([^}]+)\}", path))
        for method, op in item.items():
            if method not in METHODS:
                continue
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == names, (path, method, declared)
            for param in op.get("parameters", []):
                if param["in"] == "path":
                    assert param["required"] is True
                    assert param["schema"].get("pattern"), (path, param)


@pytest.mark.parametrize("route", [("/topics/{}/dead", "get"), ("/topics/{}/jobs", "get"), ("/topics", "get")])
def test_lists_document_their_limit(doc: dict[str, Any], route: tuple[str, str]):
    op = operations(doc)[route]
    limit = next(p for p in op["parameters"] if p["name"] == "limit")
    assert limit["in"] == "query"
    assert limit["schema"]["minimum"] == 1
    assert limit["schema"]["maximum"] == 1000
    assert limit["schema"]["default"] == 100


def test_job_lists_document_their_state_and_cursor(doc: dict[str, Any]):
    params = {p["name"]: p for p in operations(doc)[("/topics/{}/jobs", "get")]["parameters"]}
    assert params["state"]["required"] is True
    assert params["state"]["schema"]["enum"] == ["delayed", "ready", "reserved", "dead", "done"]
    assert params["cursor"]["required"] is False
    assert params["key"]["required"] is False  # one flow key's only
    assert set(params) == {"topic", "state", "limit", "cursor", "key"}


def test_forecast_documents_its_window(doc: dict[str, Any]):
    params = {p["name"]: p["schema"] for p in operations(doc)[("/topics/{}/forecast", "get")]["parameters"]}
    assert (params["minutes"]["minimum"], params["minutes"]["maximum"], params["minutes"]["default"]) == (1, 10080, 60)
    assert (params["bucket"]["minimum"], params["bucket"]["maximum"], params["bucket"]["default"]) == (1, 86400, 60)


@pytest.mark.parametrize(("route", "statuses"), SUCCESS_MODELS.items(), ids=[f"{m} {p}" for p, m in SUCCESS_MODELS])
def test_success_responses_document_their_models(doc: dict[str, Any], route: tuple[str, str], statuses: dict):
    responses = operations(doc)[route]["responses"]
    for status, model in statuses.items():
        assert status in responses, (route, sorted(responses))
        if model is not None:
            assert schema_ref(responses[status]) == model, (route, status, responses[status])
            assert model in doc["components"]["schemas"]


@pytest.mark.parametrize(("route", "errors"), CONTRACT_ERRORS.items(), ids=[f"{m} {p}" for p, m in CONTRACT_ERRORS])
def test_documented_errors_use_error_out(doc: dict[str, Any], route: tuple[str, str], errors: set[str]):
    responses = operations(doc)[route]["responses"]
    assert errors <= set(responses), (route, sorted(responses))
    for status, response in responses.items():
        if int(status) >= 400:
            expected = "UnavailableOut" if status == "503" else "ErrorOut"  # ErrorOut, with not_replicated's counts
            assert schema_ref(response) == expected, (route, status, response)


def test_error_out_schema_has_the_four_keys(doc: dict[str, Any]):
    schema = doc["components"]["schemas"]["ErrorOut"]
    assert set(schema["properties"]) == {"status", "error", "field", "message"}
    assert set(schema["required"]) == {"status", "error", "field", "message"}
    unavailable = doc["components"]["schemas"]["UnavailableOut"]
    assert set(unavailable["properties"]) == {"status", "error", "field", "message", "replicas", "wanted"}
    assert set(unavailable["required"]) == {"status", "error", "field", "message"}


def test_request_bodies_document_the_job_fields(doc: dict[str, Any]):
    ops = operations(doc)
    body = ops[("/jobs", "post")]["requestBody"]["content"]["application/json"]["schema"]
    name = body["$ref"].rsplit("/", 1)[1]
    props = doc["components"]["schemas"][name]["properties"]
    assert {"topic", "id", "body", "delay", "run_at", "retries", "timeout", "backoff"} <= set(props)
    assert "topic" in doc["components"]["schemas"][name]["required"]
    for route in (("/jobs/{}/{}", "put"), ("/jobs/{}/{}", "patch"), ("/jobs/batch", "post")):
        assert "requestBody" in ops[route], route


def test_document_is_stable_between_requests(api: Api, doc: dict[str, Any]):
    assert api.get("/openapi.json").json == doc


def test_a_204_has_no_content(doc: dict[str, Any]):
    """A generated client reads a documented content: a 204 with one made it parse an empty body."""
    no_content = [op["responses"]["204"] for op in operations(doc).values() if "204" in op["responses"]]
    assert no_content, "no route documents a 204"
    for response in no_content:
        assert "content" not in response, response


def test_batch_jobs_are_jobs_and_at_most_1000(doc: dict[str, Any]):
    body = operations(doc)[("/jobs/batch", "post")]["requestBody"]["content"]["application/json"]["schema"]
    jobs = doc["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]["properties"]["jobs"]
    assert jobs["type"] == "array"
    assert jobs["maxItems"] == MAX_BATCH == 1000
    new_job = operations(doc)[("/jobs", "post")]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert jobs["items"] == {"$ref": new_job}, jobs["items"]


def test_the_version_is_the_packages(doc: dict[str, Any]):
    assert doc["info"]["version"] == delayq.__version__ == importlib.metadata.version("delayq")
    assert doc["info"]["title"] == "delayq"


def test_conflicts_say_which_state_for_each_route(doc: dict[str, Any]):
    """PUT replaces a dead job (409 only while reserved); PATCH refuses a dead one."""
    ops = operations(doc)
    put = ops[("/jobs/{}/{}", "put")]["responses"]["409"]["description"]
    patch = ops[("/jobs/{}/{}", "patch")]["responses"]["409"]["description"]
    assert "reserved" in put
    assert "dead" not in put
    assert "reserved" in patch
    assert "dead" in patch
    assert "dead included" in ops[("/jobs/{}/{}", "put")]["summary"]


def test_the_server_is_the_base_path(
    handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str
):
    assert Api.start(redis_client, namespace).get("/openapi.json").json["servers"] == [{"url": "/"}]
    monkeypatch.setenv("DELAYQ_API_BASE_PATH", "delayq/")
    doc = Api.start(redis_client, namespace).get("/delayq/openapi.json").json
    assert doc["servers"] == [{"url": "/delayq"}]
