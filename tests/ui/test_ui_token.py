"""``delayq ui`` as a user runs it, standalone against the Redis the settings name (no loop), in a
real browser: the page shows the queue a client writes to; with ``DELAYQ_UI_TOKEN`` nothing answers
without the token, and the page opened once with ``?token=`` keeps it (out of the address bar) for
its API calls, its files and its reloads, and can act."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from delayq import Queue, Settings, Topics

from support.local import send
from support.ui import LISTING, TOPICS, Watched, delayq_ui, own_namespace, stack_env

pytestmark = pytest.mark.timeout(240)
TOKEN = "s3cret-token-of-the-view"


def client(redis_url: str, namespace: str) -> Queue:
    return Queue(Settings(redis_url=redis_url, namespace=namespace, topics=Topics.parse(TOPICS)))


@LISTING
def test_delayq_ui_shows_the_queue_a_client_writes_to(redis_url: str, tab: Watched) -> None:
    with own_namespace(redis_url) as namespace, delayq_ui(stack_env(namespace, redis_url)) as ui:
        assert ui.base.endswith(f":{ui.port}")
        queue = client(redis_url, namespace)
        queue.enqueue("reports", {"n": 1}, id="r-1", delay=600)
        page = tab.page
        page.goto(f"{ui.base}/")  # the root leads to the page
        expect(page).to_have_url(f"{ui.base}/ui/")
        row = page.locator('#topics tr[data-key="reports"]')
        expect(row.locator("td").nth(2)).to_have_text("1")
        queue.enqueue("reports", {"n": 2}, id="r-2", delay=600)
        expect(row.locator("td").nth(2)).to_have_text("2")  # refreshed by itself
        row.get_by_role("link", name="reports").click()
        expect(page.locator("#jobs tbody tr")).to_have_count(2)
        assert "no loop" in ui.output()


def test_with_a_token_nothing_answers_without_it(redis_url: str, tab: Watched) -> None:
    with own_namespace(redis_url) as namespace, delayq_ui(stack_env(namespace, redis_url, DELAYQ_UI_TOKEN=TOKEN)) as ui:
        before = client(redis_url, namespace).enqueue("reports", {"n": 1}, id="r-1", delay=600).run_at_ms
        assert TOKEN not in ui.output()
        for path in ("/ui/", "/ui/app.js", "/ui/app.css", "/topics/reports", "/jobs/reports/r-1", "/metrics", "/"):
            answer = send(ui.port, "GET", path)
            assert answer.status == 401, (path, answer)
            assert answer.headers["www-authenticate"] == "Bearer"
        assert send(ui.port, "GET", "/ui/?token=wrong").status == 401
        assert send(ui.port, "GET", "/topics/reports", headers={"Authorization": f"Bearer {TOKEN}"}).status == 200

        page = tab.page
        refused = page.goto(f"{ui.base}/ui/")
        assert refused is not None
        assert refused.status == 401

        page.goto(f"{ui.base}/ui/?token={TOKEN}#/topics/reports/jobs/r-1")
        expect(page.locator("#body")).to_have_text('{\n  "n": 1\n}')  # its API calls carry the token
        assert TOKEN not in page.url  # taken out of the address bar (and so of the history)
        assert page.url == f"{ui.base}/ui/#/topics/reports/jobs/r-1"
        cookie = next(c for c in page.context.cookies() if c["name"] == "delayq_ui")
        assert cookie["httpOnly"] is True
        assert cookie["sameSite"] == "Strict"
        assert cookie["path"] == "/ui/"
        assert TOKEN not in cookie["value"]  # derived from it, not the token itself

        page.reload()  # the page and its files come with the cookie; the API calls with the kept token
        expect(page.locator("h1 .badge")).to_have_text("delayed")
        page.get_by_label("delay in seconds").fill("7200")
        page.get_by_role("button", name="Reschedule").first.click()  # a PATCH, with the token
        expect(page.locator("#notice")).to_contain_text("Rescheduled to")
        assert client(redis_url, namespace).get("reports", "r-1").run_at_ms > before + 3600 * 1000


def test_the_cookie_is_no_token_for_what_changes_things(redis_url: str) -> None:
    """The page's cookie reads (GET, HEAD) and nothing else; a state-changing request needs the token."""
    with own_namespace(redis_url) as namespace, delayq_ui(stack_env(namespace, redis_url, DELAYQ_UI_TOKEN=TOKEN)) as ui:
        first = send(ui.port, "GET", f"/ui/?token={TOKEN}")
        assert first.status == 200
        cookie = first.headers["set-cookie"].split(";")[0]
        assert send(ui.port, "GET", "/ui/app.js", headers={"Cookie": cookie}).status == 200
        assert send(ui.port, "GET", "/topics/reports", headers={"Cookie": cookie}).status == 200
        json_cookie = {"Cookie": cookie, "Content-Type": "application/json"}
        assert send(ui.port, "POST", "/jobs", '{"topic": "reports"}', json_cookie).status == 401
        assert send(ui.port, "DELETE", "/topics/reports/dead", None, {"Cookie": cookie}).status == 401
        assert send(ui.port, "GET", "/ui/app.js", headers={"Cookie": "delayq_ui=forged"}).status == 401


def test_a_browser_without_the_token_is_told_how_to_open_the_page(redis_url: str, tab: Watched) -> None:
    """The 401 of a page load is a small page of its own (no script, nothing of the request, never the
    token) saying what to do; its form opens the view. Whatever is not a browser opening the page
    (the API, the page's files, a script asking for JSON) keeps the API's JSON 401."""
    with own_namespace(redis_url) as namespace, delayq_ui(stack_env(namespace, redis_url, DELAYQ_UI_TOKEN=TOKEN)) as ui:
        page = tab.page
        refused = page.goto(f"{ui.base}/ui/#/topics/reports")
        assert refused is not None
        assert refused.status == 401
        headers = refused.headers
        assert headers["content-type"] == "text/html; charset=utf-8"
        assert headers["www-authenticate"] == "Bearer"
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp
        assert "script-src" not in csp  # default-src 'none': no script of any kind
        assert "frame-ancestors 'none'" in csp
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["cache-control"] == "no-store"
        expect(page.locator("h1")).to_have_text("This delayq server needs its token")
        expect(page.locator("body")).to_contain_text("Open the web view once per tab as /ui/?token=<DELAYQ_UI_TOKEN>")
        markup = refused.text()
        assert TOKEN not in markup
        assert "<script" not in markup.lower()

        echo = page.goto(f"{ui.base}/ui/%3Cb%3Eechoed%3C%2Fb%3E?echoed=%3Ci%3Eechoed%3C%2Fi%3E")
        assert echo is not None
        assert echo.status == 401
        assert echo.headers["content-type"].startswith("text/html")
        assert "echoed" not in echo.text()  # nothing of the request is put in the page

        page.goto(f"{ui.base}/")  # the root, which leads to the page, answers the same
        expect(page.locator("h1")).to_have_text("This delayq server needs its token")
        page.get_by_label("Token").fill(TOKEN)
        page.get_by_role("button", name="Open the web view").click()
        expect(page.locator("#status")).to_have_text(re.compile("^live"))  # the view, its API calls with the token
        assert TOKEN not in page.url

        html = send(ui.port, "GET", "/ui/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
        head = send(ui.port, "HEAD", "/ui/", headers={"Accept": "text/html"})
        assert (head.status, head.raw) == (401, b"")
        assert head.headers["content-type"] == "text/html; charset=utf-8"
        assert head.headers["content-length"] == str(len(html.raw))
        for path, accept in [
            ("/ui/", "application/json"),  # a script asking for JSON
            ("/ui/", "text/html;q=0, application/json"),
            ("/ui/app.js", "*/*"),  # the page's files, as a browser fetches them
            ("/topics/reports", "text/html"),  # the API, whatever it is asked for
            ("/jobs/reports/r-1", ""),
        ]:
            answer = send(ui.port, "GET", path, headers={"Accept": accept} if accept else {})
            assert answer.status == 401, (path, answer)
            assert answer.headers["content-type"] == "application/json", (path, answer)
            assert answer.json["error"] == "unauthorized"
            assert answer.headers["x-content-type-options"] == "nosniff"
