"""The web view's screenshots in docs/img/, taken from a real local stack with a few topics at work:

    .venv/bin/python docs/tools/screenshots.py [--out docs/img] [--width 1280]

Starts ``python -m delayq.local`` on a free port, in a namespace of its own on the Redis at
DELAYQ_REDIS_URL (default 127.0.0.1:6379; the namespace is deleted afterwards), fills it (delayed jobs
spread over the next hour, a steady flow of due ones, dead letters, a paused topic), and photographs
its pages in Debian's chromium (headless, through Playwright): the topics, a topic's delayed jobs, a
job, a dead job with its attempts, a done job, a topic's dead jobs with two ticked, the forecast, the
banner while Redis is away; and, from ``delayq ui`` started with ``DELAYQ_UI_TOKEN``, the page a browser
is answered without the token. Also prints the weight of the first paint of a topic page: the bytes
on the wire of the page, its files and the API answers it shows. ``--width 800`` (into another
``--out``) shows how the pages fit a narrow window.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
from playwright.sync_api import Page, Request, sync_playwright

from delayq.core.activity import Counts
from delayq.core.lateness import bucket_of
from delayq.store import calls
from delayq.store.keys import Keyspace

ROOT = Path(__file__).resolve().parents[2]
TOPICS = {
    "orders": {"target": "python:delayq.local:log_delivery"},
    "emails": {"target": "python:delayq.local:log_delivery"},
    "invoices": {"target": "python:delayq.local:log_delivery"},
    "webhooks": {"target": "python:delayq.local:fail_delivery", "retries": 1, "backoff": [1]},
    "notices": {"target": "python:delayq.local:log_delivery", "key_concurrency": 2, "key_rate": 5},
    "*": {"target": "python:delayq.local:log_delivery"},
}
VIEW = {"width": 1280, "height": 760}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def call(base: str, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        raw = answer.read()
    return json.loads(raw) if raw else None


def fill(base: str, rng: random.Random) -> None:
    """The queue the pictures show."""
    orders = [
        {
            "topic": "orders",
            "id": f"order-{5100 + n}",
            "delay": rng.triangular(20, 3500, 900),
            "body": {
                "order": 5100 + n,
                "customer": f"cus_{rng.randrange(10**6):06}",
                "total": round(rng.uniform(9, 400), 2),
            },
        }
        for n in range(240)
    ]
    emails = [
        {
            "topic": "emails",
            "delay": rng.uniform(5, 3600),
            "body": {"to": f"user{n}@example.com", "template": "reminder"},
        }
        for n in range(90)
    ]
    invoices = [{"topic": "invoices", "delay": rng.uniform(600, 3000), "body": {"invoice": n}} for n in range(40)]
    for jobs in (orders, emails, invoices):
        call(base, "POST", "/jobs/batch", {"jobs": jobs})
    call(base, "POST", "/jobs", {"topic": "orders", "id": "order-4242", "delay": 1800, "body": ORDER})
    call(base, "POST", "/jobs", {"topic": "orders", "id": "order-4241", "delay": 0, "body": {"order": 4241}})
    for n in range(6):
        call(
            base,
            "POST",
            "/jobs",
            {"topic": "webhooks", "id": f"hook-{n}", "delay": 0, "body": {"event": "paid", "n": n}},
        )
    call(base, "POST", "/topics/invoices/pause")
    tenants = ["acme", "globex", "initech", "umbrella", "wayne", "stark"]
    notices = [
        {"topic": "notices", "key": f"tenant-{tenant}", "delay": rng.uniform(30, 3600), "body": {"n": n}}
        for n, tenant in enumerate(rng.choices(tenants, weights=[9, 5, 3, 2, 1, 1], k=120))
    ]
    notices += [{"topic": "notices", "key": "tenant-initech", "delay": 0, "body": {"n": n}} for n in range(4)]
    call(base, "PUT", "/topics/notices/keys/tenant-initech", {"paused": True})
    call(base, "PUT", "/topics/notices/keys/tenant-globex", {"concurrency": 1, "rate": 2})
    call(base, "POST", "/jobs/batch", {"jobs": notices})


ORDER = {
    "order": 4242,
    "customer": {"id": "cus_004242", "name": "Ada Lovelace", "email": "ada@example.com"},
    "items": [{"sku": "BOOK-1843", "qty": 1, "price": 42.0}, {"sku": "NOTE-7", "qty": 3, "price": 2.5}],
    "note": "<b>gift wrap</b>, please",
}


def past_hour(redis_url: str, namespace: str, rng: random.Random) -> None:
    """An hour of orders' history before the stack started, as its consumers would have counted it
    (core/activity.py's fields): the history tab has more to show than the seconds the stack ran."""
    partition = Keyspace(namespace, 1).for_topic("orders")
    with redis.Redis.from_url(redis_url) as client:
        minute = int(client.time()[0]) // 60
        counted = {}
        for back in range(1, 60):
            done = max(0, round(rng.gauss(120 + 60 * (back % 17 < 4), 15)))
            failed = rng.choice([0, 0, 0, 1, 2, 6]) + (25 if back == 23 else 0)
            late = {bucket_of(rng.uniform(0.6, 3)): done - 2, bucket_of(rng.uniform(5, 40 if back != 23 else 900)): 2}
            counted[(minute - back, "orders")] = Counts(late, done=done, failed=failed, dead=int(back == 23) * 4)
        calls.add_activity(partition, counted).run(client)


def flow(base: str, stop: threading.Event, rng: random.Random) -> None:
    """Jobs falling due all the time, so that the topics show lateness."""
    while not stop.is_set():
        jobs = [
            {"topic": rng.choice(["orders", "emails"]), "delay": rng.uniform(0, 2), "body": {"n": n}} for n in range(8)
        ]
        call(base, "POST", "/jobs/batch", {"jobs": jobs})
        stop.wait(0.5)


def shoot(page: Page, url: str, out: Path, wait_for: str) -> None:
    page.goto(url)
    page.wait_for_selector(wait_for)
    page.wait_for_timeout(2500)  # two refreshes: the figures settle
    page.mouse.move(0, 0)
    page.screenshot(path=str(out))
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def shoot_ticked(page: Page, url: str, out: Path, ticks: int) -> None:
    """A topic's jobs with the first ``ticks`` rows ticked: the selection and its actions."""
    page.goto(url)
    page.wait_for_selector("#jobs tbody tr")
    for box in page.locator("#jobs tbody td.pick input").all()[:ticks]:
        box.check()
    page.wait_for_timeout(2500)
    page.mouse.move(0, 0)
    page.screenshot(path=str(out))
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def start(env: dict[str, str], module: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for_health(base: str, token: str | None = None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for _ in range(300):
        try:
            with urllib.request.urlopen(urllib.request.Request(base + "/health", headers=headers), timeout=5):
                return
        except OSError:
            time.sleep(0.1)


def first_paint(page: Page, url: str) -> dict[str, int]:
    """Bytes on the wire (headers and bodies) of the first request of each path, until the jobs show."""
    sizes: dict[str, int] = {}

    def finished(request: Request) -> None:
        sizes.setdefault(urlsplit(request.url).path, sum(request.sizes().values()))

    page.on("requestfinished", finished)
    page.goto(url)
    page.wait_for_selector("#jobs tbody tr")
    page.wait_for_load_state("networkidle")
    page.remove_listener("requestfinished", finished)
    return sizes


def photograph(base: str, guarded: str, out: Path, width: int) -> dict[str, int]:
    """Every picture, in a window ``width`` wide; answers the first paint's weight."""
    ui = f"{base}/ui/"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=shutil.which("chromium") or "/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        page = browser.new_page(viewport={**VIEW, "width": width})
        sizes = first_paint(page, f"{ui}#/topics/orders/delayed")
        shoot(page, ui, out / "ui-topics.png", "#topics tbody tr")
        shoot(page, f"{ui}#/topics/orders/delayed", out / "ui-topic-delayed.png", "#jobs tbody tr")
        shoot(page, f"{ui}#/topics/orders/jobs/order-4242", out / "ui-job.png", "#body")
        shoot(page, f"{ui}#/topics/webhooks/jobs/hook-0", out / "ui-job-dead.png", "#history tbody tr")
        shoot(page, f"{ui}#/topics/orders/jobs/order-4241", out / "ui-job-done.png", "#result")
        shoot_ticked(page, f"{ui}#/topics/webhooks/dead", out / "ui-topic-dead.png", 2)
        shoot(page, f"{ui}#/topics/orders/forecast", out / "ui-forecast.png", "svg.chart rect")
        shoot(page, f"{ui}#/topics/orders/history", out / "ui-history.png", "#history-chart rect")
        shoot(page, f"{ui}#/topics/notices/keys", out / "ui-keys.png", "#keys tbody tr")
        # Redis away, as the page sees it: the API's 503 to every read of the topic
        unavailable = json.dumps({"status": 503, "error": "unavailable", "message": "Redis does not answer"})
        reads = re.compile(r"/topics/orders(/jobs)?(\?|$)")
        page.route(reads, lambda route: route.fulfill(status=503, body=unavailable))
        shoot(page, f"{ui}#/topics/orders/delayed", out / "ui-outage.png", "#outage:not([hidden])")
        page.unroute(reads)
        shoot(page, guarded, out / "ui-token.png", "h1")
        browser.close()
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--width", type=int, default=VIEW["width"], help="of the window, in CSS pixels")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    redis_url = os.environ.get("DELAYQ_REDIS_URL", "redis://127.0.0.1:6379/0")
    namespace = f"shots-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELAYQ_")}
    env.update(
        DELAYQ_REDIS_URL=redis_url, DELAYQ_NAMESPACE=namespace, DELAYQ_TOPICS=json.dumps(TOPICS), DELAYQ_TICK="0.2"
    )
    stack = start(env, "delayq.local", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    # delayq ui with a token, on the same queue: what a browser without the token is answered
    token_port = free_port()
    guarded = start({**env, "DELAYQ_UI_TOKEN": uuid.uuid4().hex}, "delayq", "ui", "--port", str(token_port))
    stop = threading.Event()
    try:
        wait_for_health(base)
        rng = random.Random(20)
        fill(base, rng)
        past_hour(redis_url, namespace, rng)
        feeder = threading.Thread(target=flow, args=(base, stop, rng), daemon=True)
        feeder.start()
        time.sleep(6)  # the consumer delivers a while: lateness to show, dead letters made
        sizes = photograph(base, f"http://127.0.0.1:{token_port}/ui/", args.out, args.width)
        print(f"first paint of a topic page: {sum(sizes.values()):,} bytes in {len(sizes)} requests: {sizes}")
    finally:
        stop.set()
        for process in (stack, guarded):
            process.terminate()
            process.wait(15)
        with redis.Redis.from_url(redis_url) as client:
            keys = list(client.scan_iter(match=f"{namespace}:*", count=1000))
            if keys:
                client.delete(*keys)


if __name__ == "__main__":
    main()
