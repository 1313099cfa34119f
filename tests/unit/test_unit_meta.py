"""The metadata codec of ``delayq.core.job.Meta`` (mirrored by ``lua/includes/meta.lua``), and the job views."""

from __future__ import annotations

import itertools

import pytest

from delayq.core.job import (
    DEAD,
    LEASED,
    QUEUED,
    RESULT_MAX_BYTES,
    DeadJob,
    Job,
    JobInfo,
    Meta,
    Scheduled,
    TopicStats,
    decode_result,
    encode_result,
)

RUN_AT = 1_795_300_000_000
ENQUEUED = 1_795_299_990_000

STATES = [QUEUED, LEASED, DEAD]
ATTEMPTS = [0, 1, 26]
LEASES = ["", "17", "1795300030000:42"]
RETRIES = [None, 0, 25]
TIMEOUTS = [None, 1000, 900_000]
BACKOFFS = [None, (0,), (15_000,), (1000, 5000, 30000), tuple(range(0, 64_000, 1000))]


def test_state_letters():
    assert (QUEUED, LEASED, DEAD) == ("q", "l", "x")


@pytest.mark.parametrize("backoff_ms", BACKOFFS)
@pytest.mark.parametrize("state", STATES)
def test_round_trip(state, backoff_ms):
    for attempts, lease, retries, timeout_ms in itertools.product(ATTEMPTS, LEASES, RETRIES, TIMEOUTS):
        meta = Meta(
            state=state,
            attempts=attempts,
            run_at_ms=RUN_AT,
            enqueued_at_ms=ENQUEUED,
            lease=lease,
            retries=retries,
            timeout_ms=timeout_ms,
            backoff_ms=backoff_ms,
        )
        raw = meta.encode()
        assert raw.count("|") == 7
        assert Meta.decode(raw) == meta
        assert Meta.decode(raw).encode() == raw


@pytest.mark.parametrize(
    ("meta", "raw"),
    [
        (Meta(QUEUED, 0, RUN_AT, ENQUEUED), f"q|0|{RUN_AT}|{ENQUEUED}||||"),
        (Meta(LEASED, 1, RUN_AT, ENQUEUED, lease="7"), f"l|1|{RUN_AT}|{ENQUEUED}|7|||"),
        (Meta(DEAD, 3, RUN_AT, ENQUEUED, retries=2), f"x|3|{RUN_AT}|{ENQUEUED}||2||"),
        (Meta(QUEUED, 0, RUN_AT, ENQUEUED, retries=0), f"q|0|{RUN_AT}|{ENQUEUED}||0||"),
        (Meta(QUEUED, 0, RUN_AT, ENQUEUED, timeout_ms=30_000), f"q|0|{RUN_AT}|{ENQUEUED}|||30000|"),
        (Meta(QUEUED, 0, RUN_AT, ENQUEUED, backoff_ms=(1000, 2500)), f"q|0|{RUN_AT}|{ENQUEUED}||||1000,2500"),
        (Meta(QUEUED, 0, RUN_AT, ENQUEUED, backoff_ms=(0,)), f"q|0|{RUN_AT}|{ENQUEUED}||||0"),
        (
            Meta(LEASED, 2, RUN_AT, ENQUEUED, lease="99", retries=5, timeout_ms=10_000, backoff_ms=(1000,)),
            f"l|2|{RUN_AT}|{ENQUEUED}|99|5|10000|1000",
        ),
        (Meta(QUEUED, 0, 0, 0), "q|0|0|0||||"),
    ],
)
def test_encode_and_decode_known_strings(meta, raw):
    assert meta.encode() == raw
    assert Meta.decode(raw) == meta


def test_decode_hand_written():
    meta = Meta.decode("q|0|1795300000000|1795299990000||||")
    assert meta.state == "q"
    assert meta.attempts == 0
    assert meta.run_at_ms == 1_795_300_000_000
    assert meta.enqueued_at_ms == 1_795_299_990_000
    assert meta.lease == ""
    assert meta.retries is None
    assert meta.timeout_ms is None
    assert meta.backoff_ms is None


def test_a_flow_key_ends_the_meta_and_comes_back():
    meta = Meta.decode("q|0|1795300000000|1795299990000|||||tenant-7")
    assert meta.key == "tenant-7"
    assert meta.retries is None
    assert meta.encode() == "q|0|1795300000000|1795299990000|||||tenant-7"
    assert Meta.decode("q|0|1795300000000|1795299990000||||").key is None


def test_decode_hand_written_with_overrides():
    meta = Meta.decode("l|3|1795300000000|1795299990000|12|0|45000|15000,180000,600000")
    assert meta.state == "l"
    assert meta.attempts == 3
    assert meta.lease == "12"
    assert meta.retries == 0
    assert meta.timeout_ms == 45_000
    assert meta.backoff_ms == (15_000, 180_000, 600_000)
    assert isinstance(meta.attempts, int)
    assert isinstance(meta.run_at_ms, int)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "q|0|1795300000000|1795299990000|||",  # 7 fields
        "q|0|1795300000000|1795299990000|||||",  # 9 fields, the last (a key) empty
        "q|0|1795300000000|1795299990000||||||tenant",  # 10 fields
        "q|x|1795300000000|1795299990000||||",
        "q|0|soon|1795299990000||||",
        "q|0|1795300000000|1795299990000||two||",
        "q|0|1795300000000|1795299990000||||1000,,2000",
    ],
)
def test_decode_refuses_malformed(raw):
    with pytest.raises(ValueError):  # noqa: PT011 - unpacking and int() both raise plain ValueError
        Meta.decode(raw)


def test_meta_is_frozen():
    meta = Meta(QUEUED, 0, RUN_AT, ENQUEUED)
    with pytest.raises(AttributeError):
        meta.attempts = 1  # type: ignore[misc]


# ----------------------------------------------------------------------------- views


def test_job_to_dict():
    job = Job(topic="orders", id="o-1", body={"a": 1}, attempt=1, run_at_ms=RUN_AT + 250, enqueued_at_ms=ENQUEUED)
    assert job.to_dict() == {
        "topic": "orders",
        "id": "o-1",
        "key": None,
        "body": {"a": 1},
        "attempt": 1,
        "run_at_ms": RUN_AT + 250,
        "run_at": "2026-11-21T22:26:40.250Z",
        "enqueued_at_ms": ENQUEUED,
    }


def test_job_info_to_dict():
    info = JobInfo("orders", "o-1", "delayed", RUN_AT, ENQUEUED, 0, 2, [1], None)
    data = info.to_dict()
    assert data["state"] == "delayed"
    assert data["run_at"] == "2026-11-21T22:26:40.000Z"
    assert data["run_at_ms"] == RUN_AT
    assert data["retries"] == 2
    assert data["last_error"] is None
    assert set(data) >= {"state", "run_at", "run_at_ms", "attempts", "retries", "body", "last_error"}


@pytest.mark.parametrize(("created", "status"), [(True, 201), (False, 200)])
def test_scheduled(created, status):
    scheduled = Scheduled("orders", "o-1", RUN_AT, created=created)
    assert scheduled.status == status
    assert scheduled.to_dict() == {
        "topic": "orders",
        "id": "o-1",
        "run_at": "2026-11-21T22:26:40.000Z",
        "run_at_ms": RUN_AT,
    }


@pytest.mark.parametrize(("next_run_at_ms", "next_run_at"), [(None, None), (RUN_AT + 1, "2026-11-21T22:26:40.001Z")])
def test_topic_stats(next_run_at_ms, next_run_at):
    data = TopicStats("orders", 1, 2, 3, 4, next_run_at_ms).to_dict()
    assert (data["delayed"], data["ready"], data["reserved"], data["dead"]) == (1, 2, 3, 4)
    assert data["next_run_at_ms"] == next_run_at_ms
    assert data["next_run_at"] == next_run_at


def test_dead_job_to_dict():
    data = DeadJob("orders", "o-1", RUN_AT + 5, 3, RUN_AT, ENQUEUED, {"x": 1}, "boom").to_dict()
    assert data["died_at_ms"] == RUN_AT + 5
    assert data["died_at"] == "2026-11-21T22:26:40.005Z"
    assert data["last_error"] == "boom"
    assert data["body"] == {"x": 1}
    assert data["attempts"] == 3


# ------------------------------------------------------------------------------------- results


@pytest.mark.parametrize("value", [{"charged": 12, "items": [1, 2]}, "done", 0, False, [], "é€😀"])
def test_a_result_round_trips_whole(value: object) -> None:
    stored = encode_result(value)
    assert stored[0] == ('"' if isinstance(value, str) else "=")
    assert decode_result(stored) == (value, False)


def test_no_result_is_stored_as_nothing() -> None:
    assert encode_result(None) == ""
    assert decode_result("") == (None, False)
    assert decode_result(None) == (None, False)


def test_a_result_json_cannot_hold_is_kept_as_its_repr() -> None:
    assert decode_result(encode_result({1, 2})) == ("{1, 2}", False)
    assert decode_result(encode_result(float("nan"))) == ("nan", False)
    cycle: list[object] = []
    cycle.append(cycle)
    assert decode_result(encode_result(cycle)) == ("[[...]]", False)


def test_a_result_over_64_kib_is_cut_to_64_kib_of_text_and_marked() -> None:
    text = "€" * 30_000  # 90,000 bytes of UTF-8: the cut falls inside a character, which is dropped whole
    value, cut = decode_result(encode_result(text))
    assert cut
    assert text.startswith(value)
    assert RESULT_MAX_BYTES - 3 < len(value.encode()) <= RESULT_MAX_BYTES
    big = {"rows": ["x" * 100] * 1000}  # its JSON cut: text, no longer JSON
    value, cut = decode_result(encode_result(big))
    assert cut
    assert len(value.encode()) == RESULT_MAX_BYTES
    assert value.startswith('{"rows":["xxx')
    exact = "\n" * RESULT_MAX_BYTES  # a text is kept as it is, not escaped as JSON would: it just fits
    assert decode_result(encode_result(exact)) == (exact, False)
    assert decode_result(encode_result(exact + "a")) == (exact, True)
    assert len(encode_result([exact])) == 1 + RESULT_MAX_BYTES  # escaped, its JSON is cut
