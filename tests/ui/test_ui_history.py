"""The web view's history tab (GET /topics/{topic}/history as charts) and the dead tab's grouping by
error (GET /topics/{topic}/dead/errors), in a real browser against the local stack as a user runs it."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from support.local import Stack, eventually
from support.ui import Watched, create, fresh_topic
from support.ui_targets import MARKUP_ERROR

pytestmark = pytest.mark.timeout(240)


def test_a_topics_history_is_a_chart_of_what_happened(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    assert (
        stack.request("POST", "/jobs/batch", {"jobs": [{"topic": topic, "delay": 0} for _ in range(7)]}).status == 200
    )
    eventually(lambda: stack.get(f"/topics/{topic}")["done"] == 7, "the jobs done", timeout=60)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/history")
    summary = page.locator("#history-summary")
    # The consumer adds its counts every 5 s: the page, refreshing by itself, shows them when they land.
    expect(summary).to_contain_text("In the last 1 h: 7 attempts started, 7 jobs done, 0 attempts failed")
    done = page.locator("#history-chart rect.done title").all_text_contents()
    assert sum(int(re.search(r"(\d+) done", title).group(1)) for title in done) == 7  # type: ignore[union-attr]
    assert page.locator("#history-chart rect.failed, #history-chart rect.dead").count() == 0
    assert page.locator("#lateness-chart .p99").count() >= 1  # a line (or a point) of the starts' p99
    page.get_by_label("What happened in the last").select_option("24 h")
    expect(summary).to_contain_text("In the last 24 h: 7 attempts started")
    expect(summary).to_contain_text("Bars of 15 min")


def test_failures_and_deaths_show_in_the_history(stack: Stack, tab: Watched) -> None:
    for n in range(3):
        create(stack, "fails", f"history-{n}", delay=0)
    eventually(lambda: stack.get("/jobs/fails/history-2")["state"] == "dead", "the jobs dead", timeout=60)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/fails/history")
    expect(page.locator("#history-chart rect.dead").first).to_be_attached()
    titles = page.locator("#history-chart rect.dead title").all_text_contents()
    assert sum(int(re.search(r"(\d+) dead", title).group(1)) for title in titles) >= 3  # type: ignore[union-attr]


def test_dead_letters_grouped_by_their_error_as_text(stack: Stack, tab: Watched) -> None:
    for n in range(2):
        create(stack, "fails", f"grouped-{n}", delay=0)
    eventually(lambda: stack.get("/jobs/fails/grouped-1")["state"] == "dead", "the jobs dead", timeout=60)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/fails/dead")
    group = page.locator("#errors tbody tr").filter(has_text=MARKUP_ERROR)
    expect(group).to_have_count(1)  # every death of the topic, one error: one group
    cells = group.locator("td")
    expect(cells.nth(1)).to_have_text(f"RuntimeError: {MARKUP_ERROR}")  # markup shown as its characters
    assert page.locator("#errors img").count() == 0
    expect(cells.nth(2)).to_contain_text("ago")
    assert int(cells.nth(0).inner_text().replace(",", "")) >= 2
    example = cells.nth(3).locator("a")
    example_id = example.inner_text()
    example.click()
    expect(page).to_have_url(re.compile(rf"#/topics/fails/jobs/{re.escape(example_id)}$"))
    expect(page.locator("main")).to_contain_text("dead")


def test_no_group_without_dead_letters(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "waiting", delay=3600)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/dead")
    expect(page.locator("#jobs")).to_be_visible()
    page.wait_for_timeout(500)
    expect(page.locator("#errors")).to_be_hidden()
