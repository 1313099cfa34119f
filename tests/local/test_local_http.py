"""The local HTTP layer (``delayq.surfaces.localhttp``) on a real socket, in-process: waitress frames each
request, the guard keeps the rules of "Safe by default", and the adapter hands the API the event API
Gateway would. The API behind it is a recorder here, so each test sees exactly what reached it (and
that a refused request reached nothing)."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from delayq.core.errors import ConfigError
from delayq.surfaces.localhttp import MAX_REQUEST_BYTES, Binding, Server, lambda_app

from support.local import JSON, Answer, send

TOKEN = "s3cret-token-\u00e9"


class Recorder:
    """A Lambda handler that answers 200 and keeps every event it was given."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.events.append(event)
        return {
            "statusCode": 200,
            "multiValueHeaders": {"Content-Type": ["application/json"], "X-Seen": ["a", "b"]},
            "body": json.dumps({"path": event["path"], "body": event["body"]}),
            "isBase64Encoded": False,
        }


@contextmanager
def serving(
    resolve: Callable[[dict[str, Any], Any], dict[str, Any]], *, host: str = "127.0.0.1", token: str | None = None
) -> Iterator[Server]:
    server = Server(host, 0, token=token)
    thread = threading.Thread(target=server.serve, args=(lambda_app(resolve),), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop()
        thread.join(15)
        assert not thread.is_alive(), "serve did not return after stop"


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def port(recorder: Recorder) -> Iterator[int]:
    with serving(recorder) as server:
        yield server.binding.port


def refused(answer: Answer, status: int, field: str) -> None:
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/json"
    assert answer.json["status"] == status
    assert answer.json["field"] == field
    assert "Traceback" not in answer.raw.decode()


# ------------------------------------------------------------------------------ framing


def test_a_chunked_body_reaches_the_api_whole(port: int, recorder: Recorder) -> None:
    """The old server ignored Transfer-Encoding: the API saw no body, and ``replay`` of one id replayed all."""
    chunked = '6\r\n{"ids"\r\n8\r\n: ["a"]}\r\n0\r\n\r\n'
    answer = send(port, "POST", "/topics/t/dead/replay", chunked, {**JSON, "Transfer-Encoding": "chunked"})
    assert answer.status == 200, answer
    [event] = recorder.events
    assert json.loads(event["body"]) == {"ids": ["a"]}
    assert event["headers"]["Content-Length"] == str(len('{"ids": ["a"]}'))


@pytest.mark.parametrize("length", ["-1", "abc", "+2", "1, 2", "0x10"])
def test_a_malformed_content_length_is_a_400_and_reaches_nothing(port: int, recorder: Recorder, length: str) -> None:
    answer = send(port, "POST", "/jobs", "{}", {**JSON, "Content-Length": length})
    assert answer.status == 400, answer
    assert b"Content-Length is invalid" in answer.raw
    assert b"Traceback" not in answer.raw
    assert recorder.events == []
    assert send(port, "GET", "/health").status == 200  # and the server goes on


def test_a_body_over_the_cap_is_a_413_before_it_is_read(port: int, recorder: Recorder) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = f"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: {MAX_REQUEST_BYTES + 1}\r\n\r\n".encode())
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 413 "), reply
    assert recorder.events == []


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "BREW", "TRACE", "CONNECT"])
def test_every_method_reaches_the_api_and_is_answered_in_json(port: int, recorder: Recorder, method: str) -> None:
    """No 501 from the server: the API decides (405 with Allow, HEAD as GET without the body ...)."""
    answer = send(port, method, "/jobs/t/x")
    assert answer.status == 200, answer
    assert answer.headers["content-type"] == "application/json"
    assert [event["httpMethod"] for event in recorder.events] == [method]
    if method == "HEAD":
        assert answer.raw == b""
        assert int(answer.headers["content-length"]) > 0  # the length a GET's body would have


def test_repeated_headers_of_the_answer_are_all_sent(port: int) -> None:
    answer = send(port, "GET", "/x")
    assert answer.headers["x-seen"] == "a, b"  # http.client joins repeated lines


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ("/topics/t/dead%0a", "/topics/t/dead\n"),
        ("/topics/t/dead%0A", "/topics/t/dead\n"),
        ("/jobs/t/a%0d%0a", "/jobs/t/a\r\n"),
        ("/jobs/t/a%00b", "/jobs/t/a\x00b"),
        ("/jobs/t/a%09", "/jobs/t/a\t"),
        ("//jobs/t/%20a%20", "//jobs/t/ a "),
    ],
)
def test_the_path_reaches_the_api_as_sent_decoded_nothing_stripped(
    port: int, recorder: Recorder, target: str, path: str
) -> None:
    """The router refuses control characters (404); the adapter must not make such a path look clean."""
    send(port, "DELETE", target)
    [event] = recorder.events
    assert event["path"] == path
    assert event["requestContext"]["path"] == path


def test_the_query_and_headers_reach_the_api(port: int, recorder: Recorder) -> None:
    send(port, "GET", "/topics/t/dead?limit=20&x=1&x=%C3%A9", headers={"X-Trace": "abc"})
    [event] = recorder.events
    assert event["queryStringParameters"] == {"limit": "20", "x": "\u00e9"}
    assert event["multiValueQueryStringParameters"] == {"limit": ["20"], "x": ["1", "\u00e9"]}
    assert event["headers"]["X-Trace"] == "abc"
    assert event["body"] is None


def test_a_body_that_is_not_utf8_reaches_the_api_as_base64(port: int, recorder: Recorder) -> None:
    send(port, "POST", "/jobs", b"\xff\xfe", JSON)
    [event] = recorder.events
    assert event["isBase64Encoded"] is True
    assert event["body"] == "//4="


def test_a_target_that_is_not_a_path_is_a_400(port: int, recorder: Recorder) -> None:
    answer = send(port, "GET", "http://127.0.0.1/health")
    refused(answer, 400, None)  # type: ignore[arg-type]
    assert recorder.events == []


def test_an_api_that_raises_is_a_json_500_without_the_traceback(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise RuntimeError("password=hunter2 in a stack frame")

    with serving(broken) as server:
        answer = send(server.binding.port, "GET", "/health")
    assert answer.status == 500
    assert answer.json["error"] == "internal"
    assert b"hunter2" not in answer.raw
    assert b"Traceback" not in answer.raw
    assert "RuntimeError" in caplog.text  # the operator sees it


def test_stop_ends_serve_and_frees_the_port(recorder: Recorder) -> None:
    with serving(recorder) as server:
        port = server.binding.port
        assert send(port, "GET", "/health").status == 200
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free again


# ------------------------------------------------------------------------------ Host


@pytest.mark.parametrize(
    "host",
    [
        "attacker.example",
        "attacker.example:{port}",
        "127.0.0.1",
        "127.0.0.1:1",
        "localhost:{port}.evil",
        "",
        "0.0.0.0:{port}",
    ],
)
def test_a_host_that_is_not_a_bound_name_is_a_403(port: int, recorder: Recorder, host: str) -> None:
    """DNS rebinding: a page whose name now points at 127.0.0.1 still sends its own name as Host."""
    answer = send(port, "POST", "/jobs", "{}", {**JSON, "Host": host.format(port=port)})
    refused(answer, 403, "Host")
    assert recorder.events == []


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "[::1]:{port}"])
def test_the_loopback_names_with_the_port_are_accepted(port: int, recorder: Recorder, host: str) -> None:
    answer = send(port, "POST", "/jobs", "{}", {**JSON, "Host": host.format(port=port)})
    assert answer.status == 200, answer


def test_a_request_without_a_host_is_a_403(port: int, recorder: Recorder) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /health HTTP/1.0\r\n\r\n")
        reply = sock.makefile("rb").read()
    assert reply.startswith(b"HTTP/1.0 403 ") or reply.startswith(b"HTTP/1.1 403 "), reply
    assert recorder.events == []


def test_the_names_of_a_binding() -> None:
    assert Binding("127.0.0.1", 8000).names == {"127.0.0.1:8000", "localhost:8000", "[::1]:8000"}
    assert Binding("localhost", 8001).loopback
    assert Binding("::1", 8000).loopback
    assert Binding("::1", 8000).url == "http://[::1]:8000"
    assert not Binding("0.0.0.0", 8000).loopback
    wildcard = Binding("0.0.0.0", 8000).names
    assert {"127.0.0.1:8000", f"{socket.gethostname().lower()}:8000"} <= wildcard
    assert Binding("127.0.0.1", 80).names >= {"127.0.0.1", "localhost:80"}


# ------------------------------------------------------------------------------ origin and media type


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize(
    "origin",
    ["http://attacker.example", "http://127.0.0.1:1", "null", "https://127.0.0.1:{port}", "http://localhost:{port}"],
)
def test_a_state_changing_request_from_another_origin_is_a_403(
    port: int, recorder: Recorder, method: str, origin: str
) -> None:
    answer = send(port, method, "/jobs/t/x", "{}", {**JSON, "Origin": origin.format(port=port)})
    refused(answer, 403, "Origin")
    assert recorder.events == []


@pytest.mark.parametrize("site", ["cross-site", "same-site", "CROSS-SITE"])
def test_a_state_changing_request_from_another_site_is_a_403(port: int, recorder: Recorder, site: str) -> None:
    """Sec-Fetch-Site: ``same-site`` is another port or a sibling name: another origin all the same."""
    answer = send(port, "POST", "/jobs", "{}", {**JSON, "Sec-Fetch-Site": site})
    refused(answer, 403, "Sec-Fetch-Site")
    assert recorder.events == []


def test_a_request_from_the_servers_own_origin_passes(port: int, recorder: Recorder) -> None:
    own = {**JSON, "Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"}
    assert send(port, "POST", "/jobs", "{}", own).status == 200
    by_name = {**JSON, "Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"}
    assert send(port, "DELETE", "/jobs/t/x", None, by_name).status == 200
    assert len(recorder.events) == 2


def test_reads_from_another_origin_pass_unread(port: int, recorder: Recorder) -> None:
    """A cross-origin GET changes nothing, and the page cannot read the answer: no CORS header is sent."""
    answer = send(port, "GET", "/health", headers={"Origin": "http://attacker.example", "Sec-Fetch-Site": "cross-site"})
    assert answer.status == 200
    assert not [name for name in answer.headers if name.startswith("access-control-")]


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonp",
        "application/json-seq",
        None,
    ],
)
def test_a_body_that_is_not_application_json_is_a_415(port: int, recorder: Recorder, content_type: str | None) -> None:
    """What a browser sends cross-site without asking first (and curl's ``-d`` default) is refused."""
    headers = {"Content-Type": content_type} if content_type else {}
    answer = send(port, "POST", "/jobs", '{"topic": "example", "delay": 3600}', headers)
    refused(answer, 415, "Content-Type")
    assert "application/json" in answer.json["message"]
    assert recorder.events == []


def test_a_typed_bodyless_request_is_a_415_and_an_untyped_one_passes(port: int, recorder: Recorder) -> None:
    refused(send(port, "POST", "/topics/t/dead/replay", None, {"Content-Type": "text/plain"}), 415, "Content-Type")
    assert send(port, "POST", "/topics/t/dead/replay").status == 200  # curl -X POST, no body: all dead jobs
    assert send(port, "POST", "/jobs", "{}", {"Content-Type": "Application/JSON; charset=utf-8"}).status == 200
    assert len(recorder.events) == 2


# ------------------------------------------------------------------------------ the token


@pytest.fixture
def token_port(recorder: Recorder) -> Iterator[int]:
    with serving(recorder, token=TOKEN) as server:
        yield server.binding.port


@pytest.mark.parametrize(
    "authorization", [None, "", "Bearer", "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"]
)
def test_with_a_token_a_request_without_it_is_a_401(
    token_port: int, recorder: Recorder, authorization: str | None
) -> None:
    headers = {"Authorization": authorization.encode().decode("latin-1")} if authorization is not None else {}
    for method, path in (("GET", "/health"), ("POST", "/topics/t/dead/replay")):
        answer = send(token_port, method, path, headers=headers)
        refused(answer, 401, "Authorization")
        assert answer.headers["www-authenticate"] == "Bearer"
        assert TOKEN not in answer.raw.decode()
    assert recorder.events == []


def test_with_a_token_a_request_with_it_passes(token_port: int, recorder: Recorder) -> None:
    bearer = {"Authorization": f"bearer {TOKEN}".encode().decode("latin-1")}
    assert send(token_port, "GET", "/health", headers=bearer).status == 200
    assert send(token_port, "POST", "/jobs", "{}", {**JSON, **bearer}).status == 200
    assert len(recorder.events) == 2


def test_the_token_in_the_query_opens_a_page_but_changes_nothing(token_port: int, recorder: Recorder) -> None:
    """``?token=`` is for the web view's first page load (a link); it never authorizes a change."""
    query = "token=s3cret-token-%C3%A9"
    assert send(token_port, "GET", f"/ui?{query}").status == 200
    refused(send(token_port, "POST", f"/topics/t/dead/replay?{query}"), 401, "Authorization")
    refused(send(token_port, "GET", "/ui?token=s3cret"), 401, "Authorization")
    assert len(recorder.events) == 1


def test_the_host_is_checked_before_the_token(token_port: int, recorder: Recorder) -> None:
    refused(send(token_port, "GET", "/health", headers={"Host": "attacker.example"}), 403, "Host")


# ------------------------------------------------------------------------------ binding


def test_binding_beyond_loopback_without_a_token_is_refused() -> None:
    with pytest.raises(ConfigError, match="DELAYQ_UI_TOKEN"):
        Server("0.0.0.0", 0)


def test_binding_beyond_loopback_with_a_token_warns_and_needs_it(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "delayq.localhttp"), serving(recorder, host="0.0.0.0", token=TOKEN) as server:
        port = server.binding.port
        assert "reachable from other machines" in caplog.text
        refused(send(port, "GET", "/health"), 401, "Authorization")
        bearer = {"Authorization": f"Bearer {TOKEN}".encode().decode("latin-1")}
        name = {"Host": f"{socket.gethostname()}:{port}"}
        assert send(port, "GET", "/health", headers={**bearer, **name}).status == 200
        refused(send(port, "GET", "/health", headers={**bearer, "Host": f"attacker.example:{port}"}), 403, "Host")
    assert TOKEN not in caplog.text


def test_a_refusal_is_logged_with_its_reason_and_the_path_quoted(port: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "delayq.localhttp"), socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            f"POST /jobs\x1b[2J HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://a.example\r\n\r\n".encode()
        )
        assert sock.recv(65536).startswith(b"HTTP/1.1 403 ")
    [line] = [record.getMessage() for record in caplog.records if "refused" in record.getMessage()]
    assert "POST '/jobs\\x1b[2J'" in line  # quoted: no terminal escape, no forged line
    assert "only pages of" in line
