"""The web view in a real browser (Debian's chromium, headless), under /ui of the local stack as a user
runs it (``python -m delayq.local``, its loops delivering): the pages show live data that changes
without a reload, the actions work through the JSON API, what a job carries shows as text and never
as markup, and the page's Content-Security-Policy would stop an injected script anyway."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Request, expect

from support.local import Stack, eventually
from support.ui import BULK_CANCEL, LISTING, WAIT_MS, Watched, confirm, create, fresh_topic
from support.ui_targets import MARKUP_ERROR

pytestmark = pytest.mark.timeout(240)
XSS = "<img src=x onerror=alert(1)>"


@LISTING
def test_the_topics_page_follows_the_queue_without_reloading(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "first")
    page = tab.page
    page.goto(f"{stack.base}/ui/")
    row = page.locator(f'#topics tr[data-key="{topic}"]')
    expect(row.locator("td").nth(2)).to_have_text("1")  # delayed
    page.evaluate("window.sameDocument = true")
    row.element_handle().evaluate("row => { row.dataset.marked = 'yes' }")

    for n in range(4):
        create(stack, topic, f"more-{n}")
    create(stack, topic, "due", delay=0)
    expect(row.locator("td").nth(2)).to_have_text("5")
    # Delivered by the stack's consumer: its lateness shows, recorded in Redis by the loop.
    expect(row.locator("td").nth(7)).not_to_have_text("—")
    expect(row.locator("td").nth(8)).not_to_have_text("—")
    assert page.evaluate("window.sameDocument") is True, "the page reloaded"
    assert row.get_attribute("data-marked") == "yes", "the row was made again, not updated in place"
    expect(page.locator("#status")).to_have_text(re.compile("^live"))


@LISTING
def test_a_topics_delayed_jobs_page_by_page(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    jobs = [{"topic": topic, "id": f"job-{n:03}", "delay": 3600 + n, "body": {"n": n}} for n in range(120)]
    assert stack.request("POST", "/jobs/batch", {"jobs": jobs}).status == 200
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/delayed")
    rows = page.locator("#jobs tbody tr")
    ids = page.locator("#jobs tbody tr td.id")

    expect(rows).to_have_count(50)
    expect(ids.first).to_have_text("job-000")  # soonest first
    expect(page.locator(".tabs a.on .count")).to_have_text("120")
    seen = ids.all_text_contents()
    page.get_by_role("button", name="Next →").click()
    expect(ids.first).to_have_text("job-050")
    seen += ids.all_text_contents()
    page.get_by_role("button", name="Next →").click()
    expect(rows).to_have_count(20)
    seen += ids.all_text_contents()
    expect(page.get_by_role("button", name="Next →")).to_be_disabled()
    assert seen == [f"job-{n:03}" for n in range(120)]  # every job once, in order
    page.get_by_role("button", name="← Previous").click()
    expect(ids.first).to_have_text("job-050")


def test_a_job_shows_its_body_and_last_error_as_text(stack: Stack, tab: Watched) -> None:
    body = {"html": XSS, "script": "</pre><script>alert(3)</script>", "n": [1, 2]}
    create(stack, "fails", "markup", delay=0, body=body)
    eventually(lambda: stack.get("/jobs/fails/markup")["state"] == "dead", "the job dead", timeout=60)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/fails/jobs/markup")

    expect(page.locator("#body")).to_have_text(json.dumps(body, indent=2))
    expect(page.locator("#last-error")).to_have_text(f"RuntimeError: {MARKUP_ERROR}")
    expect(page.locator("h1 .badge")).to_have_text("dead")
    job = stack.get("/jobs/fails/markup")
    attempts = page.locator("#history tbody tr")
    expect(attempts).to_have_count(len(job["history"]))  # each attempt, oldest first
    last = attempts.last.locator("td")
    expect(last.nth(0)).to_have_text(str(job["history"][-1]["attempt"]))
    expect(last.nth(4)).to_have_text("error")
    expect(last.nth(5)).to_have_text(f"RuntimeError: {MARKUP_ERROR}")
    expect(page.locator("dl.job dd").nth(7)).to_contain_text("ago")  # when it went dead
    assert page.locator("img[src=x], main script").count() == 0  # no element was made of them
    page.wait_for_timeout(1000)  # an onerror would have fired by now; the tab fixture checks no alert came


def test_a_jobs_result_shows_as_text_and_says_when_it_was_cut(stack: Stack, tab: Watched) -> None:
    create(stack, "answers", "markup", delay=0, body={"answer": XSS})
    create(stack, "answers", "long", delay=0, body={"answer": "0123456789", "repeat": 10_000})
    for job_id in ("markup", "long"):
        eventually(lambda j=job_id: stack.get(f"/jobs/answers/{j}")["state"] == "done", "the job done", timeout=60)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/answers/jobs/markup")
    expect(page.locator("#result")).to_have_text(json.dumps(XSS))
    expect(page.get_by_text("cut to its first 64 KiB")).to_be_hidden()
    assert page.locator("img[src=x]").count() == 0
    page.goto(f"{stack.base}/ui/#/topics/answers/jobs/long")
    expect(page.get_by_text("cut to its first 64 KiB")).to_be_visible()
    expect(page.locator("#result")).to_have_text(json.dumps("0123456789" * 6553 + "012345"))
    page.wait_for_timeout(1000)  # an onerror would have fired by now; the tab fixture checks no alert came


@LISTING
def test_a_topics_dead_jobs_show_bodies_and_errors_as_text(stack: Stack, tab: Watched) -> None:
    create(stack, "fails", "markup-listed", delay=0, body={"html": XSS})
    eventually(lambda: stack.get("/jobs/fails/markup-listed")["state"] == "dead", "the job dead", timeout=60)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/fails/dead")
    row = page.locator('#jobs tr[data-key="markup-listed"] td')
    expect(page.locator("#jobs thead th").nth(2)).to_have_text("died at (UTC)")  # after the tick box, the id
    expect(row.nth(2)).to_contain_text("ago")
    expect(row.nth(4)).to_have_text(f"RuntimeError: {MARKUP_ERROR}")
    expect(row.nth(5)).to_have_text(json.dumps({"html": XSS}, separators=(",", ":")))
    assert page.locator("img[src=x], #jobs script").count() == 0
    page.wait_for_timeout(1000)


def test_a_done_job_shows_its_receipt(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "finished", delay=0, body={"n": 1}, key="tenant-7")
    eventually(lambda: stack.get(f"/jobs/{topic}/finished")["state"] == "done", "the job done", timeout=60)
    job = stack.get(f"/jobs/{topic}/finished")
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/jobs/finished")
    expect(page.locator("h1 .badge")).to_have_text("done")
    rows = page.locator("dl.job dd")
    expect(rows.nth(0)).to_have_text("done")
    expect(rows.nth(1)).to_have_text("tenant-7")  # its flow key
    expect(rows.nth(3)).to_have_text("1 of 3")  # attempts of the allowed
    expect(rows.nth(5)).not_to_have_text("—")  # started
    expect(rows.nth(6)).not_to_have_text("—")  # done
    expect(page.locator("#body")).to_have_text("not kept: a done job's receipt keeps no body")
    assert job["started_at_ms"] <= job["done_at_ms"]
    assert job["result"]["logged"] is True  # what the example target answered
    expect(page.locator("#result")).to_have_text(json.dumps(job["result"], indent=2))
    expect(page.get_by_text("cut to its first 64 KiB")).to_be_hidden()

    page.goto(f"{stack.base}/ui/#/topics/{topic}/done")  # the topic's done tab lists it
    expect(page.locator('#jobs tr[data-key="finished"]')).to_have_count(1)
    page.goto(f"{stack.base}/ui/#/topics/{topic}/jobs/finished")
    page.get_by_role("button", name="Forget receipt").click()
    confirm(tab, "Cancel it")
    expect(page).to_have_url(f"{stack.base}/ui/#/topics/{topic}")
    assert stack.request("GET", f"/jobs/{topic}/finished").status == 404


def test_a_string_body_with_markup_is_those_characters(stack: Stack, tab: Watched) -> None:
    create(stack, "example", "xss", body=XSS)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/example/jobs/xss")
    expect(page.locator("#body")).to_have_text(json.dumps(XSS))
    assert page.locator("img[src=x]").count() == 0


def test_the_page_refuses_inline_script_even_if_markup_got_in(stack: Stack, tab: Watched) -> None:
    """Defence in depth: the Content-Security-Policy allows the page's own script file only."""
    create(stack, "example", "csp")
    page = tab.page
    response = page.goto(f"{stack.base}/ui/#/topics/example/jobs/csp")
    assert response is not None
    headers = response.headers
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "unsafe-inline" not in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    expect(page.locator("#status")).to_have_text(re.compile("^live"))
    page.evaluate(
        """() => new Promise((done) => {
            document.addEventListener("securitypolicyviolation", () => done(), {once: true});
            document.body.insertAdjacentHTML("beforeend", '<img src="/nothing" onerror="window.pwned = 1">');
        })"""
    )
    page.wait_for_timeout(500)
    assert page.evaluate("window.pwned") is None


@LISTING
def test_pause_and_resume(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "one")
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}")
    badge = page.locator("h1 .badge")
    expect(badge).to_have_text("running")
    page.locator("h1").get_by_role("button", name="Pause").click()
    expect(badge).to_have_text("paused")
    assert stack.get(f"/topics/{topic}")["paused"] is True
    create(stack, topic, "held", delay=0)
    expect(page.locator(".tabs a", has_text="ready").locator(".count")).to_have_text("1")  # due, not started
    page.locator("h1").get_by_role("button", name="Resume").click()
    expect(badge).to_have_text("running")
    expect(page.locator(".tabs a", has_text="ready").locator(".count")).to_have_text("0")  # delivered
    assert stack.get(f"/topics/{topic}")["paused"] is False


@LISTING
def test_replay_one_dead_job_and_purge_the_rest(stack: Stack, tab: Watched) -> None:
    for n in range(3):
        create(stack, "fails", f"lost-{n}", delay=0)
    eventually(lambda: all(stack.get(f"/jobs/fails/lost-{n}")["state"] == "dead" for n in range(3)), "3 dead", 60)
    assert stack.request("POST", "/topics/fails/pause").status == 200  # a replayed job stays ready to be seen
    try:
        page = tab.page
        page.goto(f"{stack.base}/ui/#/topics/fails/dead")
        row = page.locator('#jobs tr[data-key="lost-1"]')
        row.get_by_role("button", name="Replay").click()
        expect(row).to_have_count(0)
        assert stack.get("/jobs/fails/lost-1")["state"] == "ready"
        expect(page.locator("#notice")).to_have_text("Replayed lost-1")

        page.get_by_role("button", name="Purge dead").click()
        confirm(tab, "Keep")  # thought better of it: nothing purged
        assert stack.get("/jobs/fails/lost-0")["state"] == "dead"
        page.get_by_role("button", name="Purge dead").click()
        confirm(tab, "Purge")
        expect(page.locator("#jobs tbody tr")).to_have_count(0)
        assert stack.request("GET", "/jobs/fails/lost-0").status == 404
        assert stack.request("GET", "/jobs/fails/lost-2").status == 404
    finally:
        stack.request("POST", "/topics/fails/resume")


def test_cancel_a_job(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "job-0")
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/jobs/job-0")
    expect(page.locator("#body")).to_have_text("null")
    page.get_by_role("button", name="Cancel", exact=True).click()
    confirm(tab, "Keep")  # thought better of it
    assert stack.request("GET", f"/jobs/{topic}/job-0").status == 200
    page.get_by_role("button", name="Cancel", exact=True).click()
    confirm(tab, "Cancel it")
    expect(page).to_have_url(f"{stack.base}/ui/#/topics/{topic}")  # back to its topic
    assert stack.request("GET", f"/jobs/{topic}/job-0").status == 404


@LISTING
def test_cancel_a_job_from_its_topics_list(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    for n in range(3):
        create(stack, topic, f"job-{n}")
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}")
    expect(page.locator("#jobs tbody tr")).to_have_count(3)
    page.locator('#jobs tr[data-key="job-2"]').get_by_role("button", name="Cancel").click()
    confirm(tab, "Cancel it")
    expect(page.locator("#jobs tbody tr")).to_have_count(2)
    assert stack.request("GET", f"/jobs/{topic}/job-2").status == 404


@LISTING
@BULK_CANCEL
def test_cancel_every_delayed_job(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    for n in range(4):
        create(stack, topic, f"job-{n}")
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/delayed")
    expect(page.locator("#jobs tbody tr")).to_have_count(4)
    page.get_by_role("button", name="Cancel all delayed").click()
    confirm(tab, "Cancel them")
    expect(page.locator("#notice")).to_have_text("Cancelled 4 jobs")
    expect(page.locator("#jobs tbody tr")).to_have_count(0)
    assert stack.get(f"/topics/{topic}")["delayed"] == 0
    expect(page.get_by_role("button", name="Cancel all delayed")).to_be_disabled()  # nothing left to cancel


def test_find_a_job_by_its_id(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "needle-42")
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/delayed")
    page.locator("#find-id").fill("needle-42")
    page.get_by_role("button", name="Open job").click()
    expect(page.locator("h1 .name")).to_have_text("needle-42")
    expect(page.locator("h1 .badge")).to_have_text("delayed")
    page.goto(f"{stack.base}/ui/#/topics/{topic}/delayed")
    page.locator("#find-id").fill("no-such-job")
    page.locator("#find-id").press("Enter")
    expect(page.get_by_text(f"No job no-such-job in {topic}")).to_be_visible()


def test_a_banner_that_cannot_be_missed_while_redis_does_not_answer(stack: Stack, tab: Watched) -> None:
    """What the API answers while Redis is away (503), the page shows over its figures, and takes away
    once Redis answers again."""
    page = tab.page
    page.goto(f"{stack.base}/ui/")
    expect(page.locator("#status")).to_have_text(re.compile("^live"))
    expect(page.locator("#outage")).to_be_hidden()
    unavailable = json.dumps({"status": 503, "error": "unavailable", "message": "Redis does not answer"})
    page.route(re.compile(r"/topics(\?|$)"), lambda route: route.fulfill(status=503, body=unavailable))
    expect(page.locator("#outage")).to_be_visible()
    expect(page.locator("#outage")).to_contain_text("Redis does not answer: the figures below are from")
    page.unroute(re.compile(r"/topics(\?|$)"))
    expect(page.locator("#outage")).to_be_hidden()
    expect(page.locator("#status")).to_have_text(re.compile("^live"))


def test_run_a_delayed_job_now(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "later", delay=3600)
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/jobs/later")
    expect(page.locator("h1 .badge")).to_have_text("delayed")
    page.get_by_role("button", name="Run now").click()
    expect(page.locator("#notice")).to_contain_text("later is due now")
    # The stack's consumer runs it: done, and the button goes with the delayed state.
    eventually(lambda: stack.get(f"/jobs/{topic}/later")["state"] == "done", "the job done", timeout=60)
    expect(page.locator("h1 .badge")).to_have_text("done")
    expect(page.get_by_role("button", name="Run now")).to_be_hidden()


def test_reschedule_a_delayed_job(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    create(stack, topic, "later", delay=60)
    before = stack.get(f"/jobs/{topic}/later")["run_at_ms"]
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/jobs/later")
    page.get_by_label("delay in seconds").fill("7200")
    page.get_by_role("button", name="Reschedule").first.click()
    expect(page.locator("#notice")).to_contain_text("Rescheduled to")
    after = stack.get(f"/jobs/{topic}/later")["run_at_ms"]
    assert after - before > 7000 * 1000


@LISTING
def test_the_forecast_is_a_chart_of_the_delayed_jobs(stack: Stack, tab: Watched) -> None:
    topic = fresh_topic()
    jobs = [{"topic": topic, "delay": 600 + 60 * (n % 3), "body": n} for n in range(30)]
    jobs += [{"topic": topic, "delay": 2400, "body": "one"}]
    assert stack.request("POST", "/jobs/batch", {"jobs": jobs}).status == 200
    page = tab.page
    page.goto(f"{stack.base}/ui/#/topics/{topic}/forecast")
    bars = page.locator("svg.chart rect.bar")
    expect(bars).to_have_count(4)  # three minutes of ten jobs, one of one; empty minutes draw nothing
    titles = page.locator("svg.chart rect.bar title").all_text_contents()
    assert sorted(title.rsplit(": ", 1)[1] for title in titles) == ["1 jobs", "10 jobs", "10 jobs", "10 jobs"]
    expect(page.locator("main p.sub")).to_contain_text("31 jobs fall due in the next 1 h")
    page.get_by_label("Delayed jobs falling due in the next").select_option("24 h")
    expect(bars).to_have_count(2)  # 15-minute buckets: the 30 together, the one alone
    expect(page.locator("main p.sub")).to_contain_text("31 jobs fall due in the next 24 h")


@LISTING
def test_the_first_paint_of_a_topic_page_weighs_under_100_kb(stack: Stack, tab: Watched) -> None:
    """The page, its files and the API answers it needs to show a topic's first page of jobs (50,
    with bodies), as sent on the wire, headers included."""
    topic = fresh_topic()
    jobs = [{"topic": topic, "delay": 3600 + n, "body": {"order": n, "sku": "A-100", "qty": 2}} for n in range(80)]
    assert stack.request("POST", "/jobs/batch", {"jobs": jobs}).status == 200
    page = tab.page
    sizes: dict[str, int] = {}  # the first request of each path: later ones are the page's refreshes

    def finished(request: Request) -> None:
        sizes.setdefault(urlsplit(request.url).path, sum(request.sizes().values()))

    page.on("requestfinished", finished)
    page.goto(f"{stack.base}/ui/#/topics/{topic}/delayed")
    expect(page.locator("#jobs tbody tr")).to_have_count(50)
    page.wait_for_load_state("networkidle", timeout=WAIT_MS)
    # The page, its stylesheet, script and icon, the topic's stats and its first page of jobs.
    assert set(sizes) == {
        "/ui/",
        "/ui/app.css",
        "/ui/app.js",
        "/ui/icon.svg",
        f"/topics/{topic}",
        f"/topics/{topic}/jobs",
    }
    print(f"first paint of a topic page: {sum(sizes.values())} bytes: {sizes}")
    assert sum(sizes.values()) < 100_000
