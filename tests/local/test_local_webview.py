"""The web view's files as the local stack serves them, over plain HTTP: the page leads from /, each
file with its type, security headers and ETag (a 304 when unchanged), nothing else under /ui/, only
GET and HEAD; the page's script never writes markup; with a token, a browser without it is told how
to open the page."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from support.local import JSON, Stack, base_env, local_stack, send

UI = Path(__file__).resolve().parents[2] / "functions" / "delayq" / "surfaces" / "ui"


@contextmanager
def own_keys(redis_url: str, namespace: str) -> Iterator[None]:
    """The namespace's keys deleted when the block ends."""
    try:
        yield
    finally:
        with redis.Redis.from_url(redis_url) as client:
            keys = list(client.scan_iter(match=f"{namespace}:*", count=1000))
            if keys:
                client.delete(*keys)


@pytest.fixture(scope="module")
def stack(redis_url: str) -> Iterator[Stack]:
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    with own_keys(redis_url, namespace), local_stack(base_env(namespace, redis_url)) as running:
        yield running


def test_the_root_leads_to_the_page_keeping_the_query(stack: Stack) -> None:
    answer = send(stack.port, "GET", "/?token=abc")
    assert (answer.status, answer.headers["location"]) == (308, "/ui/?token=abc")
    assert send(stack.port, "GET", "/ui").headers["location"] == "/ui/"


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
        ("/ui/icon.svg", "image/svg+xml"),
    ],
)
def test_each_file_with_its_type_headers_and_etag(stack: Stack, path: str, kind: str) -> None:
    answer = send(stack.port, "GET", path)
    assert answer.status == 200
    assert answer.headers["content-type"].startswith(kind)
    csp = answer.headers["content-security-policy"]
    assert "default-src 'self'" in csp
    assert "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert "unsafe" not in csp
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["referrer-policy"] == "no-referrer"
    assert answer.headers["cache-control"] == "private, no-cache"
    name = "index.html" if path == "/ui/" else path.rsplit("/", 1)[1]
    assert answer.raw == (UI / name).read_bytes()
    again = send(stack.port, "GET", path, headers={"If-None-Match": answer.headers["etag"]})
    assert (again.status, again.raw) == (304, b"")
    head = send(stack.port, "HEAD", path)
    assert (head.status, head.raw, head.headers["content-length"]) == (200, b"", str(len(answer.raw)))


def test_nothing_else_under_ui_and_only_reading(stack: Stack) -> None:
    for path in ("/ui/nothing.js", "/ui/../pyproject.toml", "/ui/%2e%2e/api.py", "/ui/index.html%0a"):
        answer = send(stack.port, "GET", path)
        assert answer.status == 404, (path, answer)
        assert answer.json["error"] == "not_found"
    answer = send(stack.port, "POST", "/ui/", "{}", JSON)
    assert (answer.status, answer.headers["allow"]) == (405, "GET, HEAD")


def test_the_api_beside_the_page_carries_the_safe_headers_too(stack: Stack) -> None:
    answer = send(stack.port, "GET", "/health")
    assert answer.status == 200
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["referrer-policy"] == "no-referrer"


def test_the_page_script_never_parses_markup() -> None:
    """What the API answers reaches the page as text: no API that parses a string as HTML appears."""
    script = (UI / "app.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setHTML"):
        assert sink not in script, sink
    assert not re.search(r"\bsetAttribute\(\s*[\"']on", script)
    assert "<script" not in (UI / "index.html").read_text().replace('<script type="module" src="app.js"></script>', "")


def test_with_a_token_a_browser_opening_the_page_is_told_how(redis_url: str) -> None:
    """The local stack's guard, as delayq ui's: a page load without the token (a GET under /ui, or of
    /, accepting HTML) is a small HTML page saying how to open the view, the same bytes whatever the
    request; the API and whatever does not ask for HTML keep the JSON 401."""
    token = "t0ken-" + uuid.uuid4().hex
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    browser = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    with own_keys(redis_url, namespace), local_stack(base_env(namespace, redis_url, DELAYQ_UI_TOKEN=token)) as stack:
        page = send(stack.port, "GET", "/ui/", headers=browser)
        assert page.status == 401
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        text = page.raw.decode()
        assert "/ui/?token=&lt;DELAYQ_UI_TOKEN&gt;" in text
        assert token not in text
        assert "<script" not in text.lower()
        for name, value in (("x-content-type-options", "nosniff"), ("referrer-policy", "no-referrer")):
            assert page.headers[name] == value
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["content-security-policy"].startswith("default-src 'none'")
        for path in ("/", "/ui", "/ui/app.js", "/ui/%3Cb%3Eno%3C/b%3E?q=%3Ci%3E"):
            same = send(stack.port, "GET", path, headers=browser)
            assert (same.status, same.raw) == (401, page.raw), path  # nothing of the request echoed
        asks_json = {"Accept": "application/json"}
        for path, headers in (("/ui/", {}), ("/ui/", asks_json), ("/topics", browser), ("/health", browser)):
            answer = send(stack.port, "GET", path, headers=headers)
            assert answer.status == 401, (path, answer)
            assert answer.json["error"] == "unauthorized", (path, answer)
        assert send(stack.port, "GET", f"/ui/?token={token}", headers=browser).status == 200
