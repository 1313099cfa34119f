"""Times in the web view, in a real browser (Debian's chromium, headless) under /ui of the local stack:
every time shows in UTC with the zone named, as the command line prints them, even in a browser whose
own zone is another; the header's switch moves them to the browser's zone (named too) and back, and
the choice outlives a reload; a reschedule's "run at" is read in the zone shown, not the browser's."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Browser, expect

from support.local import Stack
from support.ui import Watched, create, fresh_topic, watched

pytestmark = pytest.mark.timeout(240)
ZONE = "Asia/Kolkata"  # UTC+05:30 all year: no daylight saving to reckon with
NAMES = ("Asia/Kolkata", "Asia/Calcutta")  # what a browser names it: Chromium's ICU keeps the old name
KOLKATA = timedelta(hours=5, minutes=30)


@pytest.fixture
def kolkata(browser: Browser) -> Iterator[Watched]:
    """A page in a browser whose own zone is Asia/Kolkata; as the tab fixture, it must open no dialog
    and its script must not fail."""
    seen = watched(browser, timezone_id=ZONE)
    yield seen
    seen.page.context.close()
    assert seen.dialogs == [], "the page opened a browser dialog: an injected script ran"
    assert seen.errors == [], "the page's script failed"


def browser_zone(tab: Watched) -> str:
    """The name the browser gives its own zone, which the page shows."""
    name = tab.page.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone")
    assert name in NAMES
    return str(name)


def known_time(days: int = 2) -> datetime:
    """A run-at some days ahead at 06:31:02 UTC: 12:01:02 in Kolkata, the same day."""
    return (datetime.now(UTC) + timedelta(days=days)).replace(hour=6, minute=31, second=2, microsecond=0)


def shown(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S")


def create_at(stack: Stack, topic: str, job_id: str, at: datetime) -> None:
    answer = stack.request("POST", "/jobs", {"topic": topic, "id": job_id, "run_at": at.isoformat()})
    assert answer.status == 201, answer


def test_times_show_in_utc_by_default_and_say_so(stack: Stack, kolkata: Watched) -> None:
    """The browser's own zone is Kolkata: the page still shows UTC until told otherwise."""
    topic = fresh_topic()
    at = known_time()
    create_at(stack, topic, "known", at)
    page = kolkata.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/jobs/known")
    run_at = page.locator("dl.job dd").nth(2)
    expect(run_at).to_contain_text(f"{shown(at)} UTC (in ")
    expect(page.get_by_label("times in")).to_have_value("utc")
    expect(page.locator("#status")).to_have_text(re.compile(r"^live · \d\d:\d\d:\d\d UTC$"))
    expect(page.locator(".reschedule .in-zone")).to_have_text("(UTC)")

    page.goto(f"{stack.base}/ui/#/topics/{topic}/delayed")
    expect(page.locator("#jobs thead th.at")).to_have_text("run at (UTC)")
    expect(page.locator('#jobs tr[data-key="known"] td.at')).to_contain_text(f"{shown(at)} (in ")


def test_the_switch_to_the_browsers_zone_moves_every_time_and_is_kept(stack: Stack, kolkata: Watched) -> None:
    topic = fresh_topic()
    at = known_time()
    create_at(stack, topic, "known", at)
    create(stack, topic, "soon", delay=600)  # a bar in the next hour's forecast
    page = kolkata.page
    zone = browser_zone(kolkata)
    page.goto(f"{stack.base}/ui/#/topics/{topic}/delayed")
    cell = page.locator('#jobs tr[data-key="known"] td.at')
    expect(cell).to_contain_text(shown(at))

    page.get_by_label("times in").select_option("browser")
    expect(page.locator("#jobs thead th.at")).to_have_text(f"run at ({zone})")
    expect(cell).to_contain_text(shown(at + KOLKATA))  # 12:01:02, the same instant
    expect(page.locator("#status")).to_have_text(re.compile(rf"^live · \d\d:\d\d:\d\d {re.escape(zone)}$"))

    page.reload()  # the choice is the browser's, kept in localStorage
    expect(page.get_by_label("times in")).to_have_value("browser")
    expect(cell).to_contain_text(shown(at + KOLKATA))
    page.goto(f"{stack.base}/ui/#/topics/{topic}/jobs/known")
    expect(page.locator("dl.job dd").nth(2)).to_contain_text(f"{shown(at + KOLKATA)} {zone} (in ")
    page.goto(f"{stack.base}/ui/#/topics/{topic}/forecast")
    expect(page.locator("svg.chart text.caption")).to_have_text(f"time ({zone})")
    expect(page.locator("main p.sub")).to_contain_text(f" {zone}, with 1.")

    page.get_by_label("times in").select_option("utc")  # and back
    expect(page.locator("svg.chart text.caption")).to_have_text("time (UTC)")
    expect(page.locator("main p.sub")).to_contain_text(" UTC, with 1.")
    page.goto(f"{stack.base}/ui/#/topics/{topic}/jobs/known")
    expect(page.locator("dl.job dd").nth(2)).to_contain_text(f"{shown(at)} UTC (in ")


def test_a_dead_jobs_attempts_and_the_outage_banner_name_the_zone(stack: Stack, kolkata: Watched) -> None:
    create(stack, "fails", "zoned", delay=0)
    page = kolkata.page
    zone = browser_zone(kolkata)
    page.goto(f"{stack.base}/ui/#/topics/fails/jobs/zoned")
    expect(page.locator("h1 .badge")).to_have_text("dead")
    job = stack.get("/jobs/fails/zoned")
    started = datetime.fromtimestamp(job["history"][0]["started_at_ms"] / 1000, UTC)
    expect(page.locator("#history thead th").nth(1)).to_have_text("started (UTC)")
    expect(page.locator("#history tbody tr").first.locator("td").nth(1)).to_have_text(shown(started))
    expect(page.locator("dl.job dd").nth(7)).to_contain_text(" UTC (")  # when it went dead

    page.get_by_label("times in").select_option("browser")
    expect(page.locator("#history thead th").nth(1)).to_have_text(f"started ({zone})")
    expect(page.locator("#history tbody tr").first.locator("td").nth(1)).to_have_text(shown(started + KOLKATA))

    unavailable = json.dumps({"status": 503, "error": "unavailable", "message": "Redis does not answer"})
    page.route(re.compile(r"/jobs/fails/zoned$"), lambda route: route.fulfill(status=503, body=unavailable))
    expect(page.locator("#outage")).to_contain_text(
        re.compile(rf"the figures below are from \d\d:\d\d:\d\d {re.escape(zone)}, the last answer")
    )


def test_the_run_at_of_a_reschedule_is_read_in_the_zone_shown(stack: Stack, kolkata: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "later", delay=600)
    wanted = known_time(days=3).replace(hour=10, minute=0, second=0)
    typed = wanted.strftime("%Y-%m-%dT%H:%M:%S")
    page = kolkata.page
    zone = browser_zone(kolkata)
    page.goto(f"{stack.base}/ui/#/topics/{topic}/jobs/later")
    expect(page.locator(".reschedule .in-zone")).to_have_text("(UTC)")
    page.get_by_label("run at", exact=True).fill(typed)
    page.locator(".reschedule").get_by_role("button", name="Reschedule").last.click()
    expect(page.locator("#notice")).to_have_text(f"Rescheduled to {shown(wanted)} UTC")
    assert stack.get(f"/jobs/{topic}/later")["run_at_ms"] == int(wanted.timestamp() * 1000)  # 10:00 UTC

    page.get_by_label("times in").select_option("browser")
    expect(page.locator(".reschedule .in-zone")).to_have_text(f"({zone})")
    page.get_by_label("run at", exact=True).fill(typed)
    page.locator(".reschedule").get_by_role("button", name="Reschedule").last.click()
    expect(page.locator("#notice")).to_have_text(f"Rescheduled to {shown(wanted)} {zone}")
    # 10:00 in Kolkata is 04:30 UTC
    assert stack.get(f"/jobs/{topic}/later")["run_at_ms"] == int((wanted - KOLKATA).timestamp() * 1000)
