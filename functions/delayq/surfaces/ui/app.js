// The delayq web view: reads and steers a queue through its JSON API, nothing else.
//
// Safe by construction: every value the API answers (topic names, ids, bodies, errors) reaches the
// page as text, through textContent or text nodes (h() and text() below), never as markup: nothing
// here parses a string as HTML. Views refresh themselves every REFRESH_MS, updating their nodes in place.

const API = location.pathname.replace(/\/ui\/.*$/, ""); // the API's base: the page is served at <base>/ui/
const TOKEN = "delayq.token";
const ZONE = "delayq.zone"; // localStorage: "browser" to show times in the browser's zone, else UTC
const REFRESH_MS = 2000;
const STATES = ["delayed", "ready", "reserved", "dead", "done"];
const CANCELLABLE = new Set(["delayed", "ready"]); // DELETE /topics/{topic}/jobs?state= (dead: "Purge dead")
const SELECTABLE = new Set(["delayed", "ready", "dead"]); // tabs whose jobs can be ticked and acted on together
const PAGE = 50;
const KEYS_REFRESH_MS = 10_000; // a page of flow keys walks the topic's jobs: read every 10 s, not every 2
const RANGES = { "1 h": [60, 60], "6 h": [360, 300], "24 h": [1440, 900], "7 days": [10080, 7200] };
const PAST = ["1 h", "6 h", "24 h"]; // the ranges a topic's history covers: it is kept a day
const OUTCOMES = [["done", "done"], ["failed", "failed attempts"], ["dead", "dead"]]; // a history bar's parts
const SVG = "http://www.w3.org/2000/svg";

// ------------------------------------------------------------------------------------ the token

// A first load may carry ?token=: keep it for this tab's API calls, and take it out of the address bar.
(function keepToken() {
  const url = new URL(location.href);
  const token = url.searchParams.get("token");
  if (token === null) return;
  sessionStorage.setItem(TOKEN, token);
  url.searchParams.delete("token");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
})();

// ------------------------------------------------------------------------------------ the API

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
  }
}

async function api(method, path, { query, body } = {}) {
  const url = new URL(API + path, location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null) url.searchParams.set(name, value);
  }
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN);
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url, init);
  const raw = await response.text();
  let data = null;
  try {
    data = raw ? JSON.parse(raw) : null;
  } catch {
    data = { message: `not JSON (HTTP ${response.status})` };
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

const enc = encodeURIComponent;
const jobPath = (topic, id) => `/jobs/${enc(topic)}/${enc(id)}`;
const topicPath = (topic) => `/topics/${enc(topic)}`;
const href = (...parts) => "#/" + parts.map(enc).join("/");

// ------------------------------------------------------------------------------------ DOM, as text

// h("td", {class: "num"}, "12", node): properties are set as properties, children strings as text nodes.
function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === "class") node.className = value;
    else if (name === "on") for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
    else node[name] = value;
  }
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false).map(asNode));
  return node;
}
const asNode = (child) => (child instanceof Node ? child : document.createTextNode(String(child)));

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  node.append(...children.map(asNode));
  return node;
}

// Changes a node's text only when it differs: no needless layout, no lost selection.
function text(node, value) {
  const wanted = String(value);
  if (node.textContent !== wanted) node.textContent = wanted;
}

function toggle(node, name, on) {
  if (node.classList.contains(name) !== on) node.classList.toggle(name, on);
}

// Rows keyed by key(item), kept in items' order; rows are made once and updated in place.
function syncRows(tbody, items, key, make, update) {
  const old = new Map([...tbody.rows].map((row) => [row.dataset.key, row]));
  let previous = null;
  for (const item of items) {
    const k = key(item);
    let row = old.get(k);
    if (row) old.delete(k);
    else {
      row = make(item);
      row.dataset.key = k;
    }
    update(row, item);
    const expected = previous ? previous.nextSibling : tbody.firstChild;
    if (expected !== row) tbody.insertBefore(row, expected);
    previous = row;
  }
  for (const row of old.values()) row.remove();
}

// ------------------------------------------------------------------------------------ formats

const number = new Intl.NumberFormat("en-US");
const count = (n) => (n === undefined || n === null ? "—" : number.format(n));
const jobs = (n) => `${count(n)} job${n === 1 ? "" : "s"}`;

function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  const abs = Math.abs(ms);
  if (abs < 1) return "<1 ms";
  if (abs < 1000) return `${Math.round(ms)} ms`;
  if (abs < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (abs < 3_600_000) return `${(ms / 60_000).toFixed(1)} min`;
  if (abs < 86_400_000) return `${(ms / 3_600_000).toFixed(1)} h`;
  return `${(ms / 86_400_000).toFixed(1)} d`;
}

const span = (s) => (s % 3600 === 0 ? `${s / 3600} h` : s % 60 === 0 ? `${s / 60} min` : `${s} s`);

// Times: every one the page shows is in one zone, UTC (as the command line prints them) unless the user
// picked the browser's own in the header (kept in localStorage), and says which. when() is the one place
// a time becomes text; fromZone() reads one typed in the zone shown.
const BROWSER_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
let zone = localStorage.getItem(ZONE) === "browser" ? BROWSER_ZONE : "UTC";
const formats = new Map(); // a formatter per zone, made once
function inZone(ms) {
  if (!formats.has(zone)) {
    formats.set(zone, new Intl.DateTimeFormat("en-US", { timeZone: zone, hourCycle: "h23", weekday: "short",
      year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" }));
  }
  return Object.fromEntries(formats.get(zone).formatToParts(ms).map((part) => [part.type, part.value]));
}
// "2026-11-28 06:31:02 UTC"; without the date, the seconds or the zone's name where asked (a table whose
// header names the zone), with the weekday where asked.
function when(ms, { date = true, seconds = true, weekday = false, label = true } = {}) {
  if (ms === null || ms === undefined) return "—";
  const t = inZone(ms);
  const time = `${t.hour}:${t.minute}` + (seconds ? `:${t.second}` : "");
  return [date && `${t.year}-${t.month}-${t.day}`, weekday && t.weekday, time, label && zone].filter(Boolean).join(" ");
}
const clock = (ms, options = {}) => when(ms, { date: false, ...options });
// A datetime-local input's value ("2026-11-28T06:31:02"), a wall-clock time in the zone shown, as epoch ms.
function fromZone(value) {
  const [year, month, day, hour, minute, second = 0] = value.split(/[-T:]/).map(Number);
  if (zone === "UTC") return Date.UTC(year, month - 1, day, hour, minute, second);
  return new Date(year, month - 1, day, hour, minute, second).getTime(); // the browser's zone: the only other one
}
// The zone's name, kept up to date where it labels times (a column header, an input).
const zoneName = () => h("span", { class: "zone" }, zone);
const took = (ms) => (ms < 1000 ? `${ms} ms` : duration(ms));
function relative(ms) {
  if (ms === null || ms === undefined) return "—";
  const left = ms - Date.now();
  if (Math.abs(left) < 1000) return "now";
  return left > 0 ? `in ${duration(left)}` : `${duration(-left)} ago`;
}
const oneLine = (value, most = 160) => {
  const json = value === undefined ? "" : JSON.stringify(value);
  return json.length > most ? json.slice(0, most - 1) + "…" : json;
};

// ------------------------------------------------------------------------------------ page furniture

const main = document.getElementById("main");
const statusLine = document.getElementById("status");
const notice = document.getElementById("notice");
const outage = document.getElementById("outage");
let answeredAt = null; // when the server last answered: what the page shows is from then

function say(message, bad = false) {
  text(notice, message);
  toggle(notice, "bad", bad);
  notice.hidden = false;
  clearTimeout(say.timer);
  say.timer = setTimeout(() => (notice.hidden = true), 6000);
}

function showStatus(error) {
  if (!error) {
    answeredAt = Date.now();
    text(statusLine, `live · ${clock(answeredAt)}`);
    toggle(statusLine, "live", true);
    toggle(statusLine, "down", false);
    outage.hidden = true;
    return;
  }
  toggle(statusLine, "live", false);
  toggle(statusLine, "down", true);
  // Redis or the server away: a banner that cannot be missed, over figures that are not live.
  const since = answeredAt ? `the figures below are from ${clock(answeredAt)}, the last answer` : "nothing could be read yet";
  if (error.status === 503 || !error.status) {
    const what = error.status === 503 ? "Redis does not answer" : "The server does not answer";
    text(outage, `${what}: ${since}. The page keeps trying.`);
    outage.hidden = false;
  }
  if (error.status === 401) {
    text(statusLine, "needs the token");
    say("This server needs its token: open the page as /ui/?token=<DELAYQ_UI_TOKEN> (once per tab).", true);
  } else if (error.status === 503) text(statusLine, "Redis does not answer");
  else text(statusLine, error.status ? `error ${error.status}` : "server unreachable");
}

// The header's choice of zone: UTC, or the browser's; every time shown follows at once.
const zonePicker = document.getElementById("zone");
zonePicker.replaceChildren(h("option", { value: "utc" }, "UTC"), h("option", { value: "browser" }, `${BROWSER_ZONE} (browser)`));
zonePicker.value = localStorage.getItem(ZONE) === "browser" ? "browser" : "utc";
zonePicker.addEventListener("change", () => {
  localStorage.setItem(ZONE, zonePicker.value);
  zone = zonePicker.value === "browser" ? BROWSER_ZONE : "UTC";
  for (const node of document.querySelectorAll(".zone")) text(node, zone);
  refresh();
});

function crumbs(...parts) {
  const nav = document.getElementById("crumbs");
  const items = [h("a", { href: "#/" }, "topics")];
  for (const [label, link] of parts) items.push(h("span", {}, "/"), link ? h("a", { href: link }, label) : h("b", {}, label));
  nav.replaceChildren(...items);
}

// A modal question for what cannot be undone; resolves true when confirmed.
function confirmed(question, verb) {
  const dialog = document.getElementById("confirm");
  text(document.getElementById("confirm-text"), question);
  text(document.getElementById("confirm-yes"), verb);
  return new Promise((resolve) => {
    const done = (answer) => () => {
      dialog.close();
      resolve(answer);
    };
    document.getElementById("confirm-yes").onclick = done(true);
    document.getElementById("confirm-no").onclick = done(false);
    dialog.oncancel = done(false);
    dialog.showModal();
  });
}

// Runs an action (a write), says what it did, and refreshes the view at once.
async function act(work, describe) {
  try {
    const answer = await work();
    say(describe(answer));
  } catch (error) {
    say(`Not done: ${error.message}`, true);
  }
  await refresh();
}

function button(label, onclick, { danger = false, small = false } = {}) {
  return h("button", { type: "button", class: [danger && "danger", small && "small"].filter(Boolean).join(" "), on: { click: onclick } }, label);
}

// ------------------------------------------------------------------------------------ topics

function topicsView() {
  crumbs();
  const pages = [null]; // cursors of the pages seen: back is a pop, forth a push
  const tbody = h("tbody");
  const empty = h("p", { class: "empty", hidden: true }, "No topics yet: configure one (DELAYQ_TOPICS) or create a job.");
  const where = h("span");
  const back = button("← Previous", () => (pages.pop(), refresh()));
  const next = button("Next →", () => (pages.push(next.cursor), refresh()));
  main.replaceChildren(
    h("h1", {}, "Topics"),
    h("p", { class: "sub" }, "Jobs by state; lateness: handler start minus run-at over the last 5 minutes."),
    h("div", { class: "wide" }, h("table", { id: "topics" },
      h("thead", {}, h("tr", {},
        h("th", {}, "Topic"), h("th", {}, "State"),
        ...STATES.map((state) => h("th", { class: "num" }, state)),
        h("th", { class: "num", title: "median lateness of recent deliveries" }, "late p50"),
        h("th", { class: "num", title: "99th percentile lateness of recent deliveries" }, "late p99"),
        h("th", { class: "num", title: "how long the oldest ready job has waited since it fell due" }, "oldest ready"),
        h("th", {}, "next due"), h("th", {}, ""))),
      tbody)),
    empty,
    h("div", { class: "pager" }, back, next, where));

  const make = (topic) =>
    h("tr", {},
      h("td", { class: "id" }, h("a", { href: href("topics", topic.topic) }, topic.topic)),
      h("td", {}, h("span", { class: "badge" })),
      ...STATES.map(() => h("td", { class: "num" })),
      h("td", { class: "num" }), h("td", { class: "num" }), h("td", { class: "num" }), h("td", {}),
      h("td", {}, button("", (event) => pauseOrResume(event.target.closest("tr").dataset.key,
        event.target.closest("tr").dataset.paused === "true"), { small: true })));

  const update = (row, topic) => {
    const cells = row.cells;
    row.dataset.paused = String(Boolean(topic.paused));
    const badge = cells[1].firstChild;
    text(badge, topic.paused ? "paused" : "running");
    toggle(badge, "paused", Boolean(topic.paused));
    toggle(badge, "running", !topic.paused);
    STATES.forEach((state, i) => {
      text(cells[2 + i], count(topic[state]));
      toggle(cells[2 + i], "zero", !topic[state]);
    });
    const lateness = topic.lateness || {};
    text(cells[7], duration(lateness.p50_ms));
    text(cells[8], duration(lateness.p99_ms));
    text(cells[9], topic.oldest_ready_ms ? duration(topic.oldest_ready_ms) : "—");
    text(cells[10], relative(topic.next_run_at_ms));
    text(cells[11].firstChild, topic.paused ? "Resume" : "Pause");
  };

  return {
    async refresh() {
      const page = await api("GET", "/topics", { query: { limit: 100, cursor: pages.at(-1) } });
      syncRows(tbody, page.topics, (topic) => topic.topic, make, update);
      empty.hidden = page.topics.length > 0 || pages.length > 1;
      next.cursor = page.next;
      next.disabled = !page.next;
      back.disabled = pages.length < 2;
      text(where, `page ${pages.length}`);
    },
  };
}

function pauseOrResume(topic, paused) {
  const verb = paused ? "resume" : "pause";
  return act(() => api("POST", `${topicPath(topic)}/${verb}`), () => `${topic} ${paused ? "resumed" : "paused"}`);
}

// ------------------------------------------------------------------------------------ a topic

function topicView(topic, tab) {
  crumbs([topic, null]);
  const badge = h("span", { class: "badge" });
  const pause = button("", () => pauseOrResume(topic, badge.textContent === "paused"));
  const facts = {};
  const fact = (name, label) => h("div", {}, h("dt", {}, label), (facts[name] = h("dd", {}, "—")));
  const counts = {};
  const tabs = h("nav", { class: "tabs" },
    ...STATES.map((state) =>
      h("a", { href: href("topics", topic, state), class: state === tab ? "on" : "" }, state, (counts[state] = h("span", { class: "count" }, "·")))),
    h("a", { href: href("topics", topic, "history"), class: tab === "history" ? "on" : "" }, "history"),
    h("a", { href: href("topics", topic, "forecast"), class: tab === "forecast" ? "on" : "" }, "forecast"),
    h("a", { href: href("topics", topic, "keys"), class: tab === "keys" ? "on" : "" }, "keys"));
  const parts = { forecast: forecastPart, history: historyPart, keys: keysPart };
  const body = parts[tab] ? parts[tab](topic) : tab === "dead" ? withErrors(topic, jobsPart(topic, tab, counts)) : jobsPart(topic, tab, counts);
  const findId = h("input", { type: "search", placeholder: "job id", ariaLabel: "job id", id: "find-id", spellcheck: false });
  const find = h("form", { class: "find" }, findId, h("button", { type: "submit" }, "Open job"));
  find.addEventListener("submit", (event) => {
    event.preventDefault();
    const id = findId.value.trim();
    if (id) location.hash = href("topics", topic, "jobs", id);
  });
  main.replaceChildren(
    h("h1", {}, h("span", { class: "name" }, topic), badge, pause, find),
    h("dl", { class: "facts" },
      fact("p50", "lateness p50 (5 min)"), fact("p99", "lateness p99 (5 min)"), fact("deliveries", "deliveries (5 min)"),
      fact("oldest", "oldest ready waited"), fact("next", "next due")),
    tabs,
    body.node);

  return {
    async refresh() {
      const [stats] = await Promise.all([api("GET", topicPath(topic)), body.refresh()]);
      text(badge, stats.paused ? "paused" : "running");
      toggle(badge, "paused", Boolean(stats.paused));
      toggle(badge, "running", !stats.paused);
      text(pause, stats.paused ? "Resume" : "Pause");
      const lateness = stats.lateness || {};
      text(facts.p50, duration(lateness.p50_ms));
      text(facts.p99, duration(lateness.p99_ms));
      text(facts.deliveries, count(lateness.deliveries));
      text(facts.oldest, stats.oldest_ready_ms ? duration(stats.oldest_ready_ms) : "—");
      text(facts.next, relative(stats.next_run_at_ms));
      for (const state of STATES) text(counts[state], count(stats[state]));
      body.stats?.(stats);
    },
  };
}

function jobsPart(topic, state, counts) {
  const pages = [null];
  const selectable = SELECTABLE.has(state);
  const selected = new Set(); // ids ticked, of rows shown: a page turn clears it, a refresh keeps those still shown
  const tbody = h("tbody");
  const empty = h("p", { class: "empty", hidden: true }, `No ${state} jobs.`);
  const where = h("span");
  const turn = (step) => () => (step(), selected.clear(), refresh());
  const back = button("← Previous", turn(() => pages.pop()));
  const next = button("Next →", turn(() => pages.push(next.cursor)));
  const everything = []; // the actions on every job of the state
  if (state === "dead") {
    everything.push(
      button("Replay all dead", () => act(() => api("POST", `${topicPath(topic)}/dead/replay`), (a) => `Replayed ${count(a.replayed)} jobs`)),
      button("Purge dead", async () => {
        if (await confirmed(`Delete every dead job of ${topic} for good, with its body and last error?`, "Purge"))
          await act(() => api("DELETE", `${topicPath(topic)}/dead`), (a) => `Purged ${count(a.purged)} dead jobs`);
      }, { danger: true }));
  }
  if (CANCELLABLE.has(state)) {
    everything.push(button(`Cancel all ${state}`, async () => {
      const n = counts[state].textContent;
      if (await confirmed(`Cancel all ${n} ${state} jobs of ${topic}? They are gone for good.`, "Cancel them"))
        await act(() => api("DELETE", `${topicPath(topic)}/jobs`, { query: { state } }), (a) => `Cancelled ${count(a.cancelled)} jobs`);
    }, { danger: true }));
  }
  // The actions on the jobs ticked: replay (dead) and cancel, each asking first and saying which were not acted on.
  const picked = h("span", { class: "picked" });
  const onSelected = [];
  if (state === "dead") onSelected.push(button("Replay selected", () => replaySelected()));
  if (selectable) onSelected.push(button("Cancel selected", () => cancelSelected(), { danger: true }));
  const all = h("input", { type: "checkbox", ariaLabel: "select all on this page", on: { change: () => {
    for (const row of tbody.rows) {
      if (all.checked) selected.add(row.dataset.key);
      else selected.delete(row.dataset.key);
    }
    ticks();
  } } });
  const first = selectable ? 1 : 0; // the cells after the tick box
  const fourth = state === "done" ? ["done at (", zoneName(), ")"] : ["last error"];
  const second = [state === "dead" ? "died at" : "run at", " (", zoneName(), ")"];
  const node = h("section", {},
    h("div", { class: "actions" }, ...everything, selectable && h("span", { class: "spacer" }), picked, ...onSelected),
    h("div", { class: "wide" }, h("table", { id: "jobs" },
      h("thead", {}, h("tr", {}, selectable && h("th", { class: "pick" }, all), h("th", {}, "id"), h("th", { class: "at" }, ...second),
        h("th", { class: "num" }, "attempts"), h("th", {}, ...fourth), h("th", {}, "body"), h("th", {}, ""))),
      tbody)),
    empty,
    h("div", { class: "pager" }, back, next, where));

  const make = (job) => {
    const link = h("a", { href: href("topics", topic, "jobs", job.id) }, job.id);
    const actions = h("td", {});
    if (state === "dead")
      actions.append(button("Replay", () => act(() => api("POST", `${topicPath(topic)}/dead/replay`, { body: { ids: [job.id] } }),
        (a) => (a.replayed ? `Replayed ${job.id}` : `${job.id} was not dead any more`)), { small: true }), " ");
    if (state !== "done")
      actions.append(button("Cancel", () => cancelJob(topic, job.id), { small: true, danger: true }));
    const tick = selectable && h("td", { class: "pick" }, h("input", { type: "checkbox", ariaLabel: `select ${job.id}`, on: { change: (event) => {
      if (event.target.checked) selected.add(job.id);
      else selected.delete(job.id);
      ticks();
    } } }));
    // A dead job's error is why it died: its whole first line, wrapped, not clipped.
    return h("tr", {}, tick, h("td", { class: "id mono" }, link), h("td", { class: "at" }), h("td", { class: "num" }),
      h("td", { class: state === "dead" ? "reason" : "clip" }), h("td", { class: "clip mono" }), actions);
  };
  const update = (row, job) => {
    const cells = [...row.cells].slice(first);
    const at = state === "dead" ? job.dead_at_ms : job.run_at_ms;
    text(cells[1], `${when(at, { label: false })} (${relative(at)})`);
    text(cells[2], job.retries === undefined ? count(job.attempts) : `${job.attempts} / ${job.retries + 1}`);
    const error = job.last_error || "";
    const fourthValue = state === "done" ? when(job.done_at_ms, { label: false }) : state === "dead" ? error.split("\n")[0] : error;
    text(cells[3], fourthValue);
    cells[3].title = fourthValue;
    const body = oneLine(job.body);
    text(cells[4], body);
    cells[4].title = body;
  };

  // The ticks as the selection says, after a click or a refresh: ids no longer shown leave it.
  function ticks() {
    if (!selectable) return;
    const shown = new Set([...tbody.rows].map((row) => row.dataset.key));
    for (const id of selected) if (!shown.has(id)) selected.delete(id);
    for (const row of tbody.rows) row.cells[0].firstChild.checked = selected.has(row.dataset.key);
    all.checked = shown.size > 0 && selected.size === shown.size;
    all.indeterminate = selected.size > 0 && selected.size < shown.size;
    all.disabled = !shown.size;
    text(picked, selected.size ? `${count(selected.size)} selected` : "none selected");
    for (const action of onSelected) action.disabled = !selected.size;
  }

  // Acts on the ticked jobs still in a state it may act on (read first, as the command line does);
  // says how many it acted on, and names the others with what became of them.
  async function onTicked(question, verb, acting, states, work) {
    const ids = [...selected];
    if (!ids.length || !(await confirmed(question(ids.length), verb))) return;
    selected.clear();
    await act(async () => {
      const now = await Promise.all(ids.map((id) => api("GET", jobPath(topic, id)).catch((error) => {
        if (error.status === 404) return null;
        throw error;
      })));
      const skipped = [];
      const chosen = [];
      ids.forEach((id, i) => {
        if (now[i] && states.includes(now[i].state)) chosen.push(id);
        else skipped.push(`${id} (${now[i] ? `now ${now[i].state}` : "gone"})`);
      });
      const done = chosen.length ? await work(chosen, skipped) : 0;
      return { done, skipped };
    }, ({ done, skipped }) => {
      const others = skipped.length > 10 ? [...skipped.slice(0, 10), `and ${skipped.length - 10} more`] : skipped;
      return `${acting} ${jobs(done)}` + (skipped.length ? `; not ${acting.toLowerCase()}: ${others.join(", ")}` : "");
    });
  }

  function replaySelected() {
    return onTicked((n) => `Replay ${jobs(n)} selected of ${topic}? Each dead one is due now, with fresh attempts.`,
      "Replay them", "Replayed", ["dead"], async (ids, skipped) => {
        const answer = await api("POST", `${topicPath(topic)}/dead/replay`, { body: { ids } });
        if (answer.replayed < ids.length) skipped.push(`${ids.length - answer.replayed} no longer dead by then`);
        return answer.replayed;
      });
  }

  function cancelSelected() {
    const states = state === "dead" ? ["dead"] : [...CANCELLABLE];
    const question = state === "dead"
      ? (n) => `Delete ${jobs(n)} selected of ${topic} for good, with their bodies and last errors?`
      : (n) => `Cancel ${jobs(n)} selected of ${topic}? They are gone for good.`;
    return onTicked(question, state === "dead" ? "Delete them" : "Cancel them", "Cancelled", states, async (ids, skipped) => {
      const outcomes = await Promise.allSettled(ids.map((id) => api("DELETE", jobPath(topic, id))));
      outcomes.forEach((outcome, i) => {
        if (outcome.status === "rejected") skipped.push(`${ids[i]} (${outcome.reason.status === 404 ? "gone" : outcome.reason.message})`);
      });
      return outcomes.filter((outcome) => outcome.status === "fulfilled").length;
    });
  }

  return {
    node,
    async refresh() {
      const page = await api("GET", `${topicPath(topic)}/jobs`, { query: { state, limit: PAGE, cursor: pages.at(-1) } });
      syncRows(tbody, page.jobs, (job) => job.id, make, update);
      ticks();
      empty.hidden = page.jobs.length > 0;
      next.cursor = page.next;
      next.disabled = !page.next;
      back.disabled = pages.length < 2;
      text(where, `page ${pages.length} · ${PAGE} a page`);
    },
    stats(stats) {
      // Nothing in this state: nothing for its bulk actions to do.
      for (const action of everything) action.disabled = !stats[state];
    },
  };
}

async function cancelJob(topic, id) {
  if (!(await confirmed(`Cancel job ${id} of ${topic}? It is gone for good, whatever its state.`, "Cancel it"))) return false;
  await act(() => api("DELETE", jobPath(topic, id)), () => `Cancelled ${id}`);
  return true;
}

// ------------------------------------------------------------------------------------ a topic's flow keys

// The keys holding jobs, settings or a hold, by name, a page at a time: their jobs by state, the limits
// in force (the key's own settings, else the topic's key_*), their pause and hold. Counting walks the
// topic's jobs, so the page is read again every KEYS_REFRESH_MS (at once after an action or a page
// turn); in between, the view only updates its relative times.
function keysPart(topic) {
  const pages = [null];
  let readAt = 0; // when the shown page was read; 0: read it at the next refresh
  let shown = null;
  const tbody = h("tbody");
  const empty = h("p", { class: "empty", hidden: true }, "No flow keys: no job of this topic carries a key, and no key has settings of its own.");
  const where = h("span");
  const back = button("← Previous", () => (pages.pop(), (readAt = 0), refresh()));
  const next = button("Next →", () => (pages.push(next.cursor), (readAt = 0), refresh()));
  const node = h("section", {},
    h("p", { class: "sub note" }, "Each key's jobs by state, and the limits in force for it: its own settings, else the topic's " +
      "key_concurrency, key_rate and key_burst; — where unlimited. Counted every 10 s (a count walks the topic's jobs)."),
    h("div", { class: "wide" }, h("table", { id: "keys" },
      h("thead", {}, h("tr", {},
        h("th", {}, "key"), h("th", {}, "state"),
        h("th", { class: "num" }, "delayed"), h("th", { class: "num" }, "ready"), h("th", { class: "num" }, "reserved"),
        h("th", { class: "num", title: "jobs of the key running at once, across every consumer" }, "concurrency"),
        h("th", { class: "num", title: "starts of the key's jobs per second" }, "rate"),
        h("th", { class: "num", title: "starts allowed at once above the rate (without one: the rate)" }, "burst"),
        h("th", { title: "a receiver's Retry-After holds the key's jobs until then" }, "held until (", zoneName(), ")"))),
      tbody)),
    empty,
    h("div", { class: "pager" }, back, next, where));

  async function pauseOrResumeKey(key, paused) {
    if (!paused && !(await confirmed(`Pause key ${key} of ${topic}? None of its jobs starts until it is resumed; ` +
      "they stay ready, and the other keys go on.", "Pause it"))) return;
    readAt = 0;
    await act(() => api("PUT", `${topicPath(topic)}/keys/${enc(key)}`, { body: { paused: !paused } }),
      (a) => `Key ${a.key} of ${topic} ${a.paused ? "paused" : "resumed"}`);
  }

  const make = () =>
    h("tr", {},
      h("td", { class: "id mono" }),
      h("td", { class: "state" }, h("span", { class: "badge" }), " ", button("", (event) => {
        const row = event.target.closest("tr");
        return pauseOrResumeKey(row.dataset.key, row.dataset.paused === "true");
      }, { small: true })),
      h("td", { class: "num" }), h("td", { class: "num" }), h("td", { class: "num" }),
      h("td", { class: "num" }), h("td", { class: "num" }), h("td", { class: "num" }),
      h("td", { class: "held" }, h("span"), h("small")));
  const limit = (cell, value, unit = "") => {
    text(cell, value === null || value === undefined ? "—" : `${number.format(value)}${unit}`);
    toggle(cell, "zero", value === null || value === undefined);
  };
  const update = (row, key) => {
    const cells = row.cells;
    const held = key.held_until_ms !== null && key.held_until_ms !== undefined && key.held_until_ms > Date.now();
    row.dataset.paused = String(Boolean(key.paused));
    text(cells[0], key.key);
    const badge = cells[1].firstChild;
    text(badge, key.paused ? "paused" : held ? "held" : "running");
    toggle(badge, "paused", Boolean(key.paused));
    toggle(badge, "held", !key.paused && held);
    toggle(badge, "running", !key.paused && !held);
    ["delayed", "ready", "reserved"].forEach((state, i) => {
      text(cells[2 + i], count(key[state]));
      toggle(cells[2 + i], "zero", !key[state]);
    });
    limit(cells[5], key.concurrency);
    limit(cells[6], key.rate, "/s");
    limit(cells[7], key.burst ?? key.rate);
    unbroken(cells[8].firstChild, held ? when(key.held_until_ms, { label: false }) : "—");
    text(cells[8].lastChild, held ? relative(key.held_until_ms) : "");
    text(cells[1].lastChild, key.paused ? "Resume" : "Pause");
  };

  return {
    node,
    async refresh() {
      if (!readAt || Date.now() - readAt >= KEYS_REFRESH_MS) {
        shown = await api("GET", `${topicPath(topic)}/keys`, { query: { limit: PAGE, cursor: pages.at(-1) } });
        readAt = Date.now();
      }
      syncRows(tbody, shown.keys, (key) => key.key, make, update);
      empty.hidden = shown.keys.length > 0 || pages.length > 1;
      next.cursor = shown.next;
      next.disabled = !shown.next;
      back.disabled = pages.length < 2;
      text(where, `page ${pages.length} · ${PAGE} a page`);
    },
  };
}

// Sets a node's text so that it may wrap at its spaces only, never inside a date (at its hyphens).
function unbroken(node, value) {
  if (node.dataset.value === value) return;
  node.dataset.value = value;
  node.replaceChildren(...value.split(" ").flatMap((part, i) => [i ? " " : null, h("span", { class: "nowrap" }, part)]).filter(Boolean));
}

// ------------------------------------------------------------------------------------ the forecast

function forecastPart(topic) {
  let range = "1 h";
  const picker = h("select", { on: { change: () => ((range = picker.value), refresh()) } },
    ...Object.keys(RANGES).map((name) => h("option", { value: name }, name)));
  const summary = h("p", { class: "sub" });
  const chart = svg("svg", { class: "chart", viewBox: "0 0 960 280", role: "img" });
  let drawn = "";
  const node = h("section", {},
    h("div", { class: "actions" }, h("label", {}, "Delayed jobs falling due in the next ", picker)),
    summary, chart);
  return {
    node,
    async refresh() {
      const [minutes, bucket] = RANGES[range];
      const forecast = await api("GET", `${topicPath(topic)}/forecast`, { query: { minutes, bucket } });
      const buckets = forecast.buckets;
      const key = range + zone + JSON.stringify(buckets.map((b) => b.count)) + (buckets[0] && Math.floor(buckets[0].from_ms / 60000));
      if (key === drawn) return;
      drawn = key;
      const total = buckets.reduce((sum, b) => sum + b.count, 0);
      const busiest = buckets.reduce((best, b) => (b.count > (best ? best.count : 0) ? b : best), null);
      text(summary, total
        ? `${count(total)} jobs fall due in the next ${range}, in bars of ${span(bucket)}; the busiest starts at ${clock(busiest.from_ms, { seconds: false, weekday: minutes > 1440 })}, with ${count(busiest.count)}.`
        : `No delayed job falls due in the next ${range}.`);
      const columns = buckets.map((b) => ({ from_ms: b.from_ms, parts: [["bar", b.count, "jobs"]] }));
      draw(chart, columns, { seconds: bucket < 60, weekday: minutes > 1440 });
    },
  };
}

// A bar per column, its parts ([class, count, label]) stacked, drawn as SVG nodes: a grid of round
// numbers, times along the bottom (``at``: clock's options).
function draw(chart, columns, at) {
  const { nodes, y, x, slot, base } = frame(columns, Math.max(1, ...columns.map(sumOf)), count, at);
  columns.forEach((column, i) => {
    let n = 0;
    for (const [cls, part] of column.parts) {
      if (!part) continue;
      const top = y(n + part);
      const rect = svg("rect", { class: cls, x: x(i) + slot * 0.1, y: top, width: Math.max(1, slot * 0.8),
        height: Math.max(1, y(n) - top) });
      const said = column.parts.filter(([, m]) => m).map(([, m, label]) => `${count(m)} ${label}`).join(", ");
      rect.append(svg("title", {}, `${clock(column.from_ms, at)}: ${said}`));
      nodes.push(rect);
      n += part;
    }
  });
  nodes.push(svg("line", { class: "axis", x1: x(0), x2: x(columns.length), y1: base, y2: base }));
  chart.replaceChildren(...nodes);
}

// Lines through each column's values of ``series`` ([field, class]), broken where a value is null.
function drawLines(chart, columns, series, at) {
  const most = Math.max(1, ...columns.flatMap((column) => series.map(([field]) => column[field] || 0)));
  const { nodes, y, x, slot } = frame(columns, most, (ms) => (ms ? duration(ms) : "0"), at);
  for (const [field, cls] of series) {
    let run = [];
    const flush = () => {
      if (run.length === 1) nodes.push(svg("circle", { class: cls, cx: run[0][0], cy: run[0][1], r: 2 }));
      else if (run.length) nodes.push(svg("polyline", { class: cls, points: run.map((point) => point.join(",")).join(" ") }));
      run = [];
    };
    columns.forEach((column, i) => (column[field] === null ? flush() : run.push([x(i) + slot / 2, y(column[field])])));
    flush();
  }
  chart.replaceChildren(...nodes);
}

// What both charts share: a grid of round numbers up to ``most`` labelled by ``label``, the times
// along the bottom, and the scales.
function frame(columns, most, label, at) {
  const [width, height, left, right, top, bottom] = [960, 280, 58, 12, 12, 50];
  const plotH = height - top - bottom;
  const step = niceStep(most / 4);
  const ceiling = Math.ceil(most / step) * step;
  const y = (n) => top + plotH - (n / ceiling) * plotH;
  const slot = (width - left - right) / Math.max(1, columns.length);
  const x = (i) => left + i * slot;
  const nodes = [];
  for (let n = 0; n <= ceiling; n += step) {
    nodes.push(svg("line", { class: "grid", x1: left, x2: width - right, y1: y(n), y2: y(n) }));
    nodes.push(svg("text", { x: left - 6, y: y(n) + 4, "text-anchor": "end" }, label(n)));
  }
  const every = Math.ceil(columns.length / 8);
  columns.forEach((column, i) => {
    if (i % every === 0) nodes.push(svg("text", { x: x(i), y: height - 30 }, clock(column.from_ms, { ...at, label: false })));
  });
  nodes.push(svg("text", { class: "caption", x: left + (width - left - right) / 2, y: height - 8, "text-anchor": "middle" }, `time (${zone})`));
  return { nodes, y, x, slot, base: top + plotH };
}

const sumOf = (column) => column.parts.reduce((sum, [, n]) => sum + n, 0);

// ------------------------------------------------------------------------------------ a topic's history

// What happened to the topic's jobs, minute by minute (GET /topics/{topic}/history), over the last
// hour, 6 hours or day: bars of its jobs done, failed attempts and jobs gone dead, and the lateness
// of its starts. Longer ranges group minutes into bars of 5 or 15; a bar's lateness is its worst minute's.
function historyPart(topic) {
  let range = "1 h";
  const picker = h("select", { on: { change: () => ((range = picker.value), refresh()) } },
    ...PAST.map((name) => h("option", { value: name }, name)));
  const summary = h("p", { class: "sub", id: "history-summary" });
  const jobsChart = svg("svg", { class: "chart", id: "history-chart", viewBox: "0 0 960 280", role: "img" });
  const lateChart = svg("svg", { class: "chart", id: "lateness-chart", viewBox: "0 0 960 280", role: "img" });
  const legend = h("p", { class: "legend" },
    ...OUTCOMES.map(([cls, label]) => h("span", {}, h("i", { class: cls }), label)));
  let drawn = "";
  const node = h("section", {},
    h("div", { class: "actions" }, h("label", {}, "What happened in the last ", picker)),
    summary, legend, jobsChart,
    h("h2", {}, "Lateness ", h("span", { class: "note" }, "handler start minus run-at: p50 and p99 of each bar's starts")),
    h("p", { class: "legend" }, h("span", {}, h("i", { class: "p50" }), "p50"), h("span", {}, h("i", { class: "p99" }), "p99")),
    lateChart);
  return {
    node,
    async refresh() {
      const [minutes, bucket] = RANGES[range];
      const found = await api("GET", `${topicPath(topic)}/history`, { query: { minutes } });
      const key = range + zone + JSON.stringify(found.minutes);
      if (key === drawn) return;
      drawn = key;
      const columns = grouped(found.minutes, bucket / 60);
      const total = (field) => found.minutes.reduce((sum, minute) => sum + minute[field], 0);
      const worst = Math.max(...found.minutes.map((minute) => minute.p99_ms || 0));
      text(summary, total("started")
        ? `In the last ${range}: ${count(total("started"))} attempts started, ${count(total("done"))} jobs done, ` +
          `${count(total("failed"))} attempts failed, ${count(total("dead"))} jobs went dead; the worst minute's ` +
          `p99 lateness ${duration(worst)}. Bars of ${span(bucket)}.`
        : `Nothing started in the last ${range}.`);
      const at = { seconds: false };
      draw(jobsChart, columns.map((column) => ({ from_ms: column.from_ms,
        parts: OUTCOMES.map(([field, label]) => [field, column[field], label]) })), at);
      drawLines(lateChart, columns, [["p50_ms", "p50"], ["p99_ms", "p99"]], at);
    },
  };
}

// Minutes grouped by ``size``: counts summed, each lateness the worst of the group's (null without starts).
function grouped(minutes, size) {
  const columns = [];
  for (let i = 0; i < minutes.length; i += size) {
    const group = minutes.slice(i, i + size);
    const worst = (field) => (group.some((m) => m[field] !== null) ? Math.max(...group.map((m) => m[field] || 0)) : null);
    const sum = (field) => group.reduce((n, m) => n + m[field], 0);
    columns.push({ from_ms: group[0].from_ms, started: sum("started"), done: sum("done"), failed: sum("failed"),
      dead: sum("dead"), p50_ms: worst("p50_ms"), p99_ms: worst("p99_ms") });
  }
  return columns;
}

// ------------------------------------------------------------------------------------ dead letters by error

// The dead tab, with the topic's dead jobs grouped by the first line of their error above the list
// (GET /topics/{topic}/dead/errors): how many, the latest death, an example to open.
function withErrors(topic, part) {
  const tbody = h("tbody");
  const note = h("span", { class: "note" });
  const section = h("section", { id: "errors", hidden: true },
    h("h2", {}, "By error ", note),
    h("table", {}, h("thead", {}, h("tr", {}, h("th", { class: "num" }, "jobs"), h("th", {}, "error"),
      h("th", {}, "last died (", zoneName(), ")"), h("th", {}, "example"))), tbody));
  const make = () => h("tr", {}, h("td", { class: "num" }), h("td", { class: "reason" }), h("td", {}), h("td", { class: "id mono" }));
  const update = (row, group) => {
    const cells = row.cells;
    text(cells[0], count(group.count));
    text(cells[1], group.error || "(no error recorded)");
    text(cells[2], `${when(group.last_at_ms, { label: false })} (${relative(group.last_at_ms)})`);
    cells[3].replaceChildren(h("a", { href: href("topics", topic, "jobs", group.example_id) }, group.example_id));
  };
  part.node.prepend(section);
  return {
    ...part,
    async refresh() {
      const [found] = await Promise.all([api("GET", `${topicPath(topic)}/dead/errors`), part.refresh()]);
      syncRows(tbody, found.errors, (group) => group.error, make, update);
      section.hidden = found.errors.length === 0;
      text(note, found.scanned < found.dead ? `the newest ${count(found.scanned)} of ${count(found.dead)}` : "");
    },
  };
}

function niceStep(raw) {
  const power = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
  return [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || power * 10;
}

// ------------------------------------------------------------------------------------ a job

function jobView(topic, id) {
  crumbs([topic, href("topics", topic)], [id, null]);
  const badge = h("span", { class: "badge" });
  const rows = {};
  const row = (name, label) => [h("dt", {}, label), (rows[name] = h("dd", {}, "—"))];
  const bodyText = h("pre", { id: "body" });
  const errorText = h("pre", { id: "last-error" });
  const errorPart = h("section", { hidden: true }, h("h2", {}, "Last error"), errorText);
  const resultText = h("pre", { id: "result" });
  const resultCut = h("span", { class: "note", hidden: true }, " cut to its first 64 KiB");
  const resultPart = h("section", { hidden: true }, h("h2", {}, "Result", resultCut), resultText);
  const attempts = h("tbody", {});
  const historyPart = h("section", { hidden: true }, h("h2", {}, "Attempts"),
    h("table", { id: "history" }, h("thead", {}, h("tr", {}, h("th", { class: "num" }, "#"), h("th", {}, "started (", zoneName(), ")"),
      h("th", {}, "ended (", zoneName(), ")"), h("th", { class: "num" }, "took"), h("th", {}, "outcome"), h("th", {}, "error"))), attempts));
  const gone = h("p", { class: "empty", hidden: true }, `No job ${id} in ${topic}: done and forgotten, cancelled or purged.`);
  const delay = h("input", { type: "number", min: 0, step: "any", value: 60, ariaLabel: "delay in seconds" });
  const at = h("input", { type: "datetime-local", step: 1, ariaLabel: "run at" });
  // Read as a wall-clock time in the zone the page shows, which it names: never silently the browser's.
  const reschedule = h("section", { hidden: true }, h("h2", {}, "Reschedule"), h("div", { class: "reschedule" },
    "run in", delay, "seconds", button("Reschedule", () => move({ delay: Number(delay.value) })),
    h("span", {}, "·"), h("span", { class: "nowrap" }, "run at ", at, " ", h("span", { class: "in-zone" }, "(", zoneName(), ")")),
    button("Reschedule", () => at.value && move({ run_at: new Date(fromZone(at.value)).toISOString() }))));
  const replay = button("Replay", () => act(() => api("POST", `${topicPath(topic)}/dead/replay`, { body: { ids: [id] } }),
    (a) => (a.replayed ? `Replayed ${id}` : `${id} was not dead any more`)));
  const runNow = button("Run now", () => act(() => api("POST", `${jobPath(topic, id)}/run`), (a) => `${id} is due now (${when(a.run_at_ms)})`));
  const cancel = button("Cancel", async () => {
    if (await cancelJob(topic, id)) location.hash = href("topics", topic);
  }, { danger: true });
  const details = h("section", {},
    h("div", { class: "actions" }, runNow, replay, cancel),
    h("dl", { class: "job" },
      ...row("state", "state"), ...row("key", "key"), ...row("run_at", "run at"), ...row("attempts", "attempts"), ...row("enqueued", "enqueued"),
      ...row("started", "started"), ...row("done", "done"), ...row("dead", "dead")),
    historyPart, errorPart, resultPart, reschedule, h("h2", {}, "Body"), bodyText);
  main.replaceChildren(h("h1", {}, "Job ", h("span", { class: "name mono" }, id), badge), gone, details);

  function move(when_) {
    return act(() => api("PATCH", jobPath(topic, id), { body: when_ }), (a) => `Rescheduled to ${when(a.run_at_ms)}`);
  }

  return {
    async refresh() {
      let job;
      try {
        job = await api("GET", jobPath(topic, id));
      } catch (error) {
        if (error.status !== 404) throw error;
        gone.hidden = false;
        details.hidden = true;
        text(badge, "gone");
        return;
      }
      gone.hidden = true;
      details.hidden = false;
      text(badge, job.state);
      for (const state of ["dead", "done"]) toggle(badge, state, job.state === state);
      text(rows.state, job.state);
      text(rows.key, job.key ?? "—");
      text(rows.run_at, `${when(job.run_at_ms)} (${relative(job.run_at_ms)})`);
      text(rows.attempts, job.retries === undefined ? count(job.attempts) : `${job.attempts} of ${job.retries + 1}`);
      text(rows.enqueued, job.enqueued_at_ms ? `${when(job.enqueued_at_ms)} (${relative(job.enqueued_at_ms)})` : "—");
      text(rows.started, job.started_at_ms ? when(job.started_at_ms) : "—");
      text(rows.done, job.done_at_ms ? when(job.done_at_ms) : "—");
      text(rows.dead, job.dead_at_ms ? `${when(job.dead_at_ms)} (${relative(job.dead_at_ms)})` : "—");
      const history = job.history || [];
      historyPart.hidden = !history.length;
      attempts.replaceChildren(...history.map((a) => h("tr", { class: `outcome-${a.outcome}` },
        h("td", { class: "num" }, a.attempt), h("td", {}, when(a.started_at_ms, { label: false })), h("td", {}, when(a.ended_at_ms, { label: false })),
        h("td", { class: "num" }, a.started_at_ms && a.ended_at_ms ? took(a.ended_at_ms - a.started_at_ms) : "—"),
        h("td", { class: "outcome" }, a.outcome.replace("_", " ")), h("td", { class: "error" }, a.error || ""))));
      errorPart.hidden = !job.last_error;
      text(errorText, job.last_error || "");
      resultPart.hidden = job.state !== "done";
      resultCut.hidden = !job.result_truncated;
      text(resultText, job.result == null ? "none: the handler answered nothing" : JSON.stringify(job.result, null, 2));
      const kept = job.state !== "done"; // a receipt keeps no body
      text(bodyText, !kept ? "not kept: a done job's receipt keeps no body" : job.body === undefined ? "" : JSON.stringify(job.body, null, 2));
      reschedule.hidden = !["delayed", "ready"].includes(job.state);
      replay.hidden = job.state !== "dead";
      runNow.hidden = job.state !== "delayed";
      text(cancel, job.state === "done" ? "Forget receipt" : "Cancel");
    },
  };
}

// ------------------------------------------------------------------------------------ routing and refreshing

let view = null;
let running = null; // the refresh in flight

function route() {
  let parts = [];
  try {
    parts = location.hash.slice(1).split("/").map(decodeURIComponent);
  } catch {
    // a mistyped address: the topics
  }
  const [, kind, topic, tab, id] = parts;
  if (kind === "topics" && topic && tab === "jobs" && id) view = jobView(topic, id);
  else if (kind === "topics" && topic) view = topicView(topic, STATES.includes(tab) || ["history", "forecast", "keys"].includes(tab) ? tab : "delayed");
  else view = topicsView();
  window.scrollTo(0, 0);
  refresh();
}

// Refreshes the view shown; one refresh at a time, and an answer for a view left meanwhile is dropped.
async function refresh() {
  const mine = view;
  if (running) await running.catch(() => {});
  if (mine !== view) return;
  running = mine.refresh();
  try {
    await running;
    if (mine === view) showStatus(null);
  } catch (error) {
    if (mine === view) showStatus(error);
  } finally {
    running = null;
  }
}

window.addEventListener("hashchange", route);
setInterval(() => document.visibilityState === "visible" && !running && refresh(), REFRESH_MS);
route();
