"""Several jobs at once in the web view, in a real browser (Debian's chromium, headless) under /ui of the
local stack: a tick box per row and one for the page; "Replay selected" and "Cancel selected" act on the
jobs ticked and no other, ask first, and say how many they acted on and which not (and why); the
page's refresh keeps the ticks of rows still shown, a page turn clears them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import Locator, expect

from support.local import Stack, eventually
from support.ui import Watched, confirm, create, fresh_topic

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def paused_fails(stack: Stack) -> Iterator[None]:
    """The failing topic paused once its jobs are dead, so that a replayed job stays ready to be seen."""
    yield
    assert stack.request("POST", "/topics/fails/resume").status == 200


def tick(tab: Watched, job_id: str) -> Locator:
    box = tab.page.get_by_label(f"select {job_id}", exact=True)
    box.check()
    return box


def dead_jobs(stack: Stack, n: int) -> list[str]:
    """``n`` jobs of the failing topic, dead (it retries none), then the topic paused."""
    ids = [f"lost-{uuid.uuid4().hex[:6]}-{i}" for i in range(n)]
    for job_id in ids:
        create(stack, "fails", job_id, delay=0)
    eventually(lambda: all(stack.get(f"/jobs/fails/{j}")["state"] == "dead" for j in ids), f"{n} dead", timeout=60)
    assert stack.request("POST", "/topics/fails/pause").status == 200
    return ids


def state(stack: Stack, topic: str, job_id: str) -> str:
    answer = stack.request("GET", f"/jobs/{topic}/{job_id}")
    return "gone" if answer.status == 404 else str(answer.json["state"])


@pytest.mark.usefixtures("paused_fails")
def test_replay_two_of_three_dead_jobs(stack: Stack, tab: Watched) -> None:
    first, second, third = dead_jobs(stack, 3)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/fails/dead")
    replay = page.get_by_role("button", name="Replay selected")
    expect(replay).to_be_disabled()  # nothing ticked
    tick(tab, first)
    tick(tab, third)
    expect(page.locator(".picked")).to_have_text("2 selected")
    replay.click()
    confirm(tab, "Keep")  # thought better of it: nothing replayed
    assert state(stack, "fails", first) == "dead"
    expect(page.get_by_label(f"select {first}", exact=True)).to_be_checked()  # still ticked
    replay.click()
    confirm(tab, "Replay them")
    expect(page.locator("#notice")).to_have_text("Replayed 2 jobs")
    assert state(stack, "fails", first) == "ready"
    assert state(stack, "fails", third) == "ready"
    assert state(stack, "fails", second) == "dead"  # not ticked: untouched
    expect(page.locator(f'#jobs tr[data-key="{first}"]')).to_have_count(0)
    expect(page.get_by_label(f"select {second}", exact=True)).not_to_be_checked()
    expect(page.locator(".picked")).to_have_text("none selected")


@pytest.mark.usefixtures("paused_fails")
def test_what_was_not_replayed_is_named(stack: Stack, tab: Watched) -> None:
    """A job replayed by someone else while the question was open is not dead any more: named, with its state."""
    first, second = dead_jobs(stack, 2)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/fails/dead")
    tick(tab, first)
    tick(tab, second)
    page.get_by_role("button", name="Replay selected").click()
    expect(page.locator("dialog#confirm")).to_be_visible()
    assert stack.request("POST", "/topics/fails/dead/replay", {"ids": [second]}).json == {"replayed": 1}
    confirm(tab, "Replay them")
    expect(page.locator("#notice")).to_have_text(f"Replayed 1 job; not replayed: {second} (now ready)")
    assert state(stack, "fails", first) == "ready"


@pytest.mark.usefixtures("paused_fails")
def test_delete_selected_dead_jobs(stack: Stack, tab: Watched) -> None:
    first, second = dead_jobs(stack, 2)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/fails/dead")
    tick(tab, first)
    page.get_by_role("button", name="Cancel selected").click()
    expect(page.locator("dialog#confirm")).to_contain_text("Delete 1 job selected of fails for good")
    confirm(tab, "Delete them")
    expect(page.locator("#notice")).to_have_text("Cancelled 1 job")
    assert state(stack, "fails", first) == "gone"
    assert state(stack, "fails", second) == "dead"


def test_cancel_selected_delayed_jobs(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    for n in range(4):
        create(stack, topic, f"job-{n}")
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/delayed")
    expect(page.locator("#jobs tbody tr")).to_have_count(4)
    tick(tab, "job-0")
    tick(tab, "job-2")
    tick(tab, "job-3")
    cancel = page.get_by_role("button", name="Cancel selected")
    cancel.click()
    expect(page.locator("dialog#confirm")).to_be_visible()
    assert stack.request("DELETE", f"/jobs/{topic}/job-3").status == 204  # meanwhile: one goes elsewhere ...
    confirm(tab, "Cancel them")
    expect(page.locator("#notice")).to_have_text("Cancelled 2 jobs; not cancelled: job-3 (gone)")  # ... and is named
    expect(page.locator("#jobs tbody tr td.id")).to_have_text(["job-1"])
    assert [state(stack, topic, f"job-{n}") for n in range(4)] == ["gone", "delayed", "gone", "gone"]


def test_the_refresh_keeps_ticks_of_rows_still_shown(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    for n in range(3):
        create(stack, topic, f"job-{n}", delay=3600 + n)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/delayed")
    kept = tick(tab, "job-0")
    tick(tab, "job-1")
    expect(page.locator(".picked")).to_have_text("2 selected")
    create(stack, topic, "job-new", delay=3600 + 9)  # seen only once the page has refreshed by itself
    assert stack.request("DELETE", f"/jobs/{topic}/job-1").status == 204  # a ticked row that goes
    expect(page.locator("#jobs tbody tr td.id")).to_have_text(["job-0", "job-2", "job-new"])
    expect(kept).to_be_checked()
    expect(page.locator(".picked")).to_have_text("1 selected")  # job-1's tick went with its row
    expect(page.get_by_label("select job-new", exact=True)).not_to_be_checked()


def test_select_all_on_a_page(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    jobs = [{"topic": topic, "id": f"job-{n:03}", "delay": 3600 + n} for n in range(60)]
    assert stack.request("POST", "/jobs/batch", {"jobs": jobs}).status == 200
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/delayed")
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(50)
    every = page.get_by_label("select all on this page")
    every.check()
    expect(page.locator(".picked")).to_have_text("50 selected")
    page.get_by_label("select job-007", exact=True).uncheck()
    expect(every).not_to_be_checked()  # some, not all: the page's box says so
    assert every.evaluate("box => box.indeterminate") is True
    every.check()
    expect(page.locator(".picked")).to_have_text("50 selected")

    page.get_by_role("button", name="Next →").click()  # a page turn clears the selection
    expect(page.locator("#jobs tbody tr td.id").first).to_have_text("job-050")
    expect(page.locator(".picked")).to_have_text("none selected")
    expect(every).not_to_be_checked()
    page.get_by_role("button", name="← Previous").click()
    expect(page.locator("#jobs tbody tr td.id").first).to_have_text("job-000")
    expect(page.get_by_label("select job-000", exact=True)).not_to_be_checked()

    every.check()
    page.get_by_role("button", name="Cancel selected").click()
    confirm(tab, "Cancel them")
    expect(page.locator("#notice")).to_have_text("Cancelled 50 jobs")
    expect(page.locator("#jobs tbody tr td.id").first).to_have_text("job-050")
    assert stack.get(f"/topics/{topic}")["delayed"] == 10
    assert state(stack, topic, "job-049") == "gone"
    assert state(stack, topic, "job-050") == "delayed"
