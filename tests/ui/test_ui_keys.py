"""A topic's flow keys in the web view, in a real browser (Debian's chromium, headless) under /ui of the
local stack: the keys with their counts, the limits in force and their pause, page by page; a key
paused and resumed through its button, which asks first, says what it did, and reaches Redis
(``Queue.key``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from delayq import Queue

from support.local import Stack, local_stack
from support.ui import TOPICS, Watched, confirm, create, fresh_topic, own_namespace, stack_env

pytestmark = pytest.mark.timeout(240)
LIMITED = "limited"  # a topic whose keys have limits by default
CELLS = ["key", "state", "delayed", "ready", "reserved", "concurrency", "rate", "burst", "held until (UTC)"]


@pytest.fixture(scope="module")
def running(redis_url: str) -> Iterator[tuple[Stack, Queue]]:
    """The local stack, and a ``Queue`` of its namespace to look at Redis with."""
    topics = {**TOPICS, LIMITED: {"target": "python:delayq.local:log_delivery", "key_concurrency": 3, "key_rate": 5}}
    with own_namespace(redis_url) as namespace:
        env = stack_env(namespace, redis_url)
        env["DELAYQ_TOPICS"] = json.dumps(topics)
        with local_stack(env) as stack:
            queue = Queue(redis_url=redis_url, namespace=namespace)
            try:
                yield stack, queue
            finally:
                queue.redis.close()


@pytest.fixture
def stack(running: tuple[Stack, Queue]) -> Stack:
    return running[0]


@pytest.fixture
def queue(running: tuple[Stack, Queue]) -> Queue:
    return running[1]


def test_a_topics_keys_with_their_counts_and_limits(stack: Stack, tab: Watched) -> None:
    for n in range(3):
        create(stack, LIMITED, f"t7-{n}", key="tenant-7")
    create(stack, LIMITED, "acme-0", key="acme")
    create(stack, LIMITED, "plain")  # no key: not listed
    assert stack.request("PUT", f"/topics/{LIMITED}/keys/acme", {"concurrency": 1, "rate": 0.5}).status == 200
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{LIMITED}")
    page.locator(".tabs a", has_text="keys").click()
    expect(page).to_have_url(f"{stack.base}/ui/#/topics/{LIMITED}/keys")
    expect(page.locator(".tabs a.on")).to_have_text("keys")

    expect(page.locator("#keys thead th")).to_have_text(CELLS, ignore_case=True)
    expect(page.locator("#keys tbody tr")).to_have_count(2)
    expect(page.locator("#keys tbody tr td:first-child")).to_have_text(["acme", "tenant-7"])  # by name
    acme = page.locator('#keys tr[data-key="acme"] td')
    expect(acme).to_have_text(["acme", "running Pause", "1", "0", "0", "1", "0.5/s", "0.5", "—"])
    seven = page.locator('#keys tr[data-key="tenant-7"] td')
    expect(seven).to_have_text(["tenant-7", "running Pause", "3", "0", "0", "3", "5/s", "5", "—"])  # the topic's
    expect(page.locator("#status")).to_have_text(re.compile("^live"))


def test_pause_and_resume_a_key(stack: Stack, queue: Queue, tab: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "a-0", key="tenant-a")
    create(stack, topic, "b-0", key="tenant-b")
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/keys")
    row = page.locator('#keys tr[data-key="tenant-a"]')
    badge = row.locator(".badge")
    expect(badge).to_have_text("running")

    row.get_by_role("button", name="Pause").click()
    confirm(tab, "Keep")  # thought better of it: nothing changed
    assert queue.key(topic, "tenant-a").limits.paused is False
    row.get_by_role("button", name="Pause").click()
    expect(page.locator("dialog#confirm p")).to_contain_text("Pause key tenant-a of")
    confirm(tab, "Pause it")
    expect(badge).to_have_text("paused")  # shown at once, not at the next count
    expect(page.locator("#notice")).to_have_text(f"Key tenant-a of {topic} paused")
    assert queue.key(topic, "tenant-a").limits.paused is True
    assert queue.key(topic, "tenant-b").limits.paused is False  # the other keys go on
    expect(page.locator('#keys tr[data-key="tenant-b"] .badge')).to_have_text("running")

    row.get_by_role("button", name="Resume").click()  # undoing a pause asks nothing
    expect(badge).to_have_text("running")
    expect(page.locator("#notice")).to_have_text(f"Key tenant-a of {topic} resumed")
    assert queue.key(topic, "tenant-a").limits.paused is False


def test_a_paused_keys_due_jobs_wait_ready(stack: Stack, queue: Queue, tab: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "later", key="dest")
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/keys")
    row = page.locator('#keys tr[data-key="dest"]')
    row.get_by_role("button", name="Pause").click()
    confirm(tab, "Pause it")
    expect(row.locator(".badge")).to_have_text("paused")
    create(stack, topic, "due", delay=0, key="dest")  # the stack's consumer does not start it
    page.wait_for_timeout(1500)
    assert queue.key(topic, "dest").ready == 1
    assert stack.get(f"/jobs/{topic}/due")["state"] == "ready"


def test_keys_page_by_page(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    jobs = [{"topic": topic, "id": f"job-{n:03}", "delay": 3600, "key": f"key-{n:03}"} for n in range(60)]
    assert stack.request("POST", "/jobs/batch", {"jobs": jobs}).status == 200
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/keys")
    names = page.locator("#keys tbody tr td:first-child")
    expect(page.locator("#keys tbody tr")).to_have_count(50)
    expect(names.first).to_have_text("key-000")
    seen = names.all_text_contents()
    page.get_by_role("button", name="Next →").click()
    expect(page.locator("#keys tbody tr")).to_have_count(10)
    expect(names.first).to_have_text("key-050")
    seen += names.all_text_contents()
    expect(page.get_by_role("button", name="Next →")).to_be_disabled()
    assert seen == [f"key-{n:03}" for n in range(60)]
    page.get_by_role("button", name="← Previous").click()
    expect(names.first).to_have_text("key-000")


def test_a_topic_without_keys_says_so(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "plain")
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/keys")
    expect(page.locator("main p.empty")).to_have_text(re.compile("^No flow keys"))
    expect(page.locator("#keys tbody tr")).to_have_count(0)


def test_a_held_key_says_until_when(stack: Stack, tab: Watched) -> None:
    """A receiver's Retry-After hold, as the route answers it (made up here: the stack's consumer would
    race a real one): the key shows as held, until when and in how long."""
    topic = fresh_topic()
    create(stack, topic, "a", key="dest")
    page = tab.page
    until = int(page.evaluate("Date.now()")) + 600_000
    held = {"key": "dest", "delayed": 1, "ready": 0, "reserved": 0, "concurrency": None, "rate": None, "burst": None,
            "paused": False, "held_until_ms": until}  # fmt: skip
    page.route(
        re.compile(rf"/topics/{topic}/keys\?"),
        lambda route: route.fulfill(json={"keys": [held], "next": None}),
    )
    page.goto(f"{stack.base}/ui/#/topics/{topic}/keys")
    cells = page.locator('#keys tr[data-key="dest"] td')
    expect(cells.nth(1).locator(".badge")).to_have_text("held")
    expect(cells.nth(5)).to_have_text("—")  # no concurrency limit
    expect(cells.nth(8)).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d"))  # the date, however the view writes times
    expect(cells.nth(8).locator("small")).to_have_text(re.compile(r"^in (10\.0|9\.\d) min$"))
