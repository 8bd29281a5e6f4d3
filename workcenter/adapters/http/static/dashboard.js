// The Workcenter dashboard: reads the API, follows the change stream, shows the
// selected item's goal progress, budget, Actions and Runs, and audit; how text is shown
// is text.js's, the conversation with the Coordinator conversation.js's, the item list
// list.js's, the steering controls steering.js's and the create form create.js's.
// Every value is set as text (never as markup); no build step, no dependency.
"use strict";

const CRITERION_WORDS = { passed: "met", failed: "contradicted", unmet: "unmet" };
const REFRESH_DELAY_MS = 120;
// A detail read older than the item is read again, further apart each time, up to this.
const BEHIND_MAX_MS = 4000;
const RECONNECT_MS = 1000;
// A read that failed is tried again after this, twice as long each time, up to the max.
const RETRY_FIRST_MS = 1000;
const RETRY_MAX_MS = 15000;
const READS_FAILING = "reads failing; trying again";

// The item an address names (#id): decoded where it can be (a malformed escape is kept as
// written, and said to name no item) and in lower case, as the server and its change
// stream write ids (found by acceptance testing: the page broke, or never updated).
function idInAddress() {
  const raw = location.hash.slice(1);
  let id = raw;
  try {
    id = decodeURIComponent(raw);
  } catch (_malformed) {
    // kept as written
  }
  return id.toLowerCase();
}

const state = {
  token: sessionStorage.getItem("workcenter-token"),
  selected: idInAddress() || null,
  chosen: Boolean(location.hash.slice(1)),
  lastEventId: null,
  listDirty: false,
  detailDirty: false,
  refreshing: false,
  timer: null,
  // The wait before a failed read is tried again (it doubles while reads keep failing).
  retryMs: RETRY_FIRST_MS,
  // Detail reads in a row that showed the item older than it is (a runner behind).
  behindReads: 0,
  // The item's ETag as the conversation was last read: a message echoes it in If-Match.
  conversationEtag: null,
  // The item's ETag as its detail was last read: a steering command echoes it.
  itemEtag: null,
  // Counts the commands answered: a detail read begun before the last one may show the
  // item from before it, and is not let replace the ETag that command's answer gave.
  commandsAnswered: 0,
  detail: null,
  commanding: false,
  // Kept until a post of this text is answered, so a retry of it writes nothing twice.
  pendingMessage: null,
  // The conversation's version and ETag at the first read after a message was refused
  // (null until then): the refusal is shown until either changes.
  messageErrorAt: null,
  // Whether that refusal was for a Coordinator turn in progress.
  messageRefusedThinking: false,
  // The stop the extend form was last pre-filled for, and the open guide/answer form.
  prefilledStop: null,
  actionForm: null,
};

// ``build()`` rebuilds what ``root`` holds: the element the keyboard was on (named by its
// data-key) has the focus again, where a live update threw it out to the page (found by
// acceptance testing, ADR-0137).
function keepingFocus(root, build) {
  const focused = document.activeElement;
  const key = focused && root.contains(focused) ? focused.dataset.key : undefined;
  build();
  if (key === undefined) return;
  const again = [...root.querySelectorAll("[data-key]")].find((n) => n.dataset.key === key);
  if (again && !again.disabled) again.focus({ preventScroll: true });
}

// An Action as the timeline numbers it ("Action 2"); by its short id only when the
// detail does not list it.
function actionName(id) {
  const actions = (state.detail && state.detail.actions) || [];
  const action = actions.find((a) => a.id === id);
  return "Action " + (action ? action.sequence : short(id));
}

function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  if (state.token) h.Authorization = "Bearer " + state.token;
  return h;
}

class Unauthorized extends Error {}

class Problem extends Error {
  constructor(status, problem, fallback) {
    super(problem.title ? problem.title + ": " + problem.detail : fallback);
    this.status = status;
    this.fields = Array.isArray(problem.errors) ? problem.errors : [];
  }
}

async function checked(response) {
  if (response.status === 401) {
    askForToken();
    throw new Unauthorized("token required");
  }
  if (!response.ok) {
    const problem = await response.json().catch(() => ({}));
    throw new Problem(response.status, problem, response.statusText);
  }
  return response;
}

async function read(path) {
  const response = await checked(await fetch(path, { headers: headers(), cache: "no-store" }));
  return { body: await response.json(), etag: response.headers.get("ETag") };
}

async function api(path) {
  return (await read(path)).body;
}

function askForToken() {
  const form = $("token-form");
  // Said as it is: a token was given and refused, or none was given yet.
  $("token-note").textContent = state.token
    ? "The API token was refused: enter it again."
    : "This server needs its API token.";
  form.hidden = false;
  form.onsubmit = (event) => {
    event.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("workcenter-token", state.token);
    form.hidden = true;
    start();
  };
}

// --- the selected item -----------------------------------------------------------

async function refreshDetail() {
  const id = state.selected;
  if (!id) return;
  const answered = state.commandsAnswered;
  const base = "/api/work-items/" + encodeURIComponent(id);
  let shown;
  try {
    shown = await read(base);
  } catch (failure) {
    // A bookmarked or typed id that names no item: said on the page, and not read again.
    if (!(failure instanceof Problem && failure.status === 404) || id !== state.selected) {
      throw failure;
    }
    state.selected = null;
    $("detail").hidden = true;
    const note = $("not-found");
    note.textContent = "No work item has the id " + visible(id.slice(0, 80)) + ".";
    note.hidden = false;
    document.title = "No such work item – Workcenter";
    said.item = null; // the next item read is a first read: nothing to say of it
    return;
  }
  const [timeline, audit, talk, decided] = await Promise.all([
    api(base + "/timeline"),
    api(base + "/audit?limit=100"),
    read(base + "/conversation"),
    api(base + "/decisions"),
  ]);
  if (id !== state.selected) return;
  if (answered !== state.commandsAnswered) {
    // Read before a command's answer: read again rather than echo an ETag from before
    // it, which the server would refuse as stale.
    state.detailDirty = true;
    schedule();
    return;
  }
  $("not-found").hidden = true;
  const detail = shown.body;
  state.itemEtag = shown.etag;
  state.detail = detail;
  followRunner(detail, timeline);
  setControls();
  checkActionForm(timeline);
  state.conversationEtag = talk.etag;
  renderConversation(talk.body, decided, base);
  $("detail").hidden = false;
  setWords($("item-title"), detail.title);
  document.title = visible(detail.title) + " – Workcenter";
  sayChanges(id, detail.status, talk.body.messages);
  const status = $("item-status");
  status.textContent = detail.status;
  status.className = "status " + detail.status;
  setWords($("item-goal"), detail.goal);
  $("item-summary").textContent = visible(detail.actionSummary || "");
  // "Execution stopped: CODE" is the contract's summary; the stop banner says it in
  // words, so the code is not shown twice (found by acceptance testing).
  const control = detail.executionControl || {};
  const explained = control.stopReason &&
    detail.failureReason === "Execution stopped: " + control.stopReason.code;
  const failure = $("item-failure");
  failure.hidden = !detail.failureReason || Boolean(explained);
  failure.textContent = visible(detail.failureReason || "");
  renderProgress(detail.goalProgress);
  renderBudget(detail.executionControl);
  renderTimeline(timeline);
  renderAudit(audit);
}

// Where a projection runner keeps the detail view, a detail read can show the item as
// it was a moment ago, while the timeline, read from the item itself, names its versions
// now. No change event follows the runner's catching up, so the page reads the detail
// again until it shows those versions: it stayed old until a reload, and every click
// was refused as stale (found by acceptance testing, ADR-0128). While behind the page
// steers nothing (a command would echo the older versions); a read behind once may be a
// write between the two reads, so only behind twice does it say so.
function followRunner(detail, timeline) {
  const control = detail.executionControl || {};
  const behind =
    Number(detail.planRevision) < Number(timeline.itemVersion) ||
    Number(control.revision) < Number(timeline.controlVersion);
  state.behindReads = behind ? state.behindReads + 1 : 0;
  $("item-behind").hidden = state.behindReads < 2;
  if (behind) {
    state.detailDirty = true;
    schedule(Math.min(BEHIND_MAX_MS, REFRESH_DELAY_MS * 2 ** state.behindReads));
  }
}

function runIds(ids) {
  const cell = el("td", null, "mono");
  for (const id of ids || []) {
    const tag = el("span", short(id) + " ");
    tag.title = id;
    cell.append(tag);
  }
  return cell;
}

function renderProgress(progress) {
  const body = $("criteria").tBodies[0];
  body.replaceChildren();
  const blockers = $("blockers");
  blockers.replaceChildren();
  if (!progress) {
    $("progress-count").textContent = "(no criteria)";
    return;
  }
  $("progress-count").textContent =
    "(" + progress.completedCriteriaCount + " of " + progress.totalCriteriaCount + " met)";
  for (const row of progress.criteria) {
    const word = CRITERION_WORDS[row.status] || row.status;
    const tr = el("tr", null, "criterion");
    tr.dataset.status = word;
    tr.append(ownWords("td", row.criterion)); // a Hebrew or Arabic one reads right to left
    const status = el("td");
    status.append(el("span", word, "status " + word));
    tr.append(status);
    tr.append(runIds(row.status === "failed" ? row.conflictingRunIds : row.evidenceRunIds));
    body.append(tr);
  }
  if (progress.omittedCriteriaCount) {
    // The detail carries 100 criteria (its size budget): the rest are counted, not shown.
    const more = el("tr", null, "omitted");
    const cell = el("td", progress.omittedCriteriaCount + " more criteria not shown", "muted");
    cell.colSpan = 3;
    more.append(cell);
    body.append(more);
  }
  const delivery = progress.delivery || {};
  const tr = el("tr", null, "delivery");
  tr.append(el("td", "delivery (" + (delivery.target || "no target named") + ")"));
  const status = el("td");
  // With no target nothing is to be delivered: not "unmet" on an item done without one
  // (found by acceptance testing); the CLI says "no target named" too.
  const word = delivery.target
    ? CRITERION_WORDS[delivery.status] || delivery.status
    : "none asked";
  status.append(el("span", word, "status " + (delivery.target ? word : "none-asked")));
  tr.append(status);
  tr.append(runIds(delivery.evidenceRunIds));
  body.append(tr);
  for (const blocker of progress.blockers || []) {
    blockers.append(
      el("li", actionName(blocker.actionId) + " " + blocker.status + ": " + blocker.reason),
    );
  }
}

function gauge(id, used, limit) {
  const node = $(id);
  const ratio = limit ? Math.min(1, used / limit) : 0;
  const fill = node.querySelector(".fill");
  fill.style.width = 100 * ratio + "%";
  fill.className = "fill" + (ratio >= 1 ? " full" : ratio >= 0.8 ? " high" : "");
  node.querySelector(".gauge-value").textContent =
    used.toLocaleString() + " of " + limit.toLocaleString();
}

function renderBudget(control) {
  if (!control) return;
  const usage = control.usage || {};
  const limits = control.limits || {};
  gauge("gauge-tokens", usage.chargedTokens || 0, limits.maxTokens || 0);
  gauge("gauge-requests", usage.llmRequestCount || 0, limits.maxRequests || 0);
  $("coordinator-failures").textContent =
    (control.coordinatorFailures || 0) + " of " + (limits.maxCoordinatorFailures || 0);
  renderStop(control);
}

function renderTimeline(timeline) {
  keepingFocus($("timeline"), () => drawTimeline(timeline));
}

function drawTimeline(timeline) {
  const root = $("timeline");
  root.replaceChildren();
  const runs = timeline.actions.flatMap((a) => a.runs);
  const start = Math.min(...runs.map((r) => r.startedAt), timeline.now);
  const end = Math.max(...runs.map((r) => r.endedAt || timeline.now), start + 1);
  for (const action of timeline.actions) {
    const row = el("div", null, "tl-row");
    row.dataset.status = action.status;
    const label = el("div", null, "tl-label");
    const name = el("span", action.sequence + " " + action.type + " ");
    name.title = "Action " + action.sequence + " (" + short(action.id) + ")";
    label.append(name);
    label.append(el("span", action.status, "status " + action.status));
    label.append(...actionButtons(action));
    row.append(label);
    const track = el("div", null, "tl-track");
    for (const run of action.runs) {
      const bar = el("div", null, "tl-run " + run.status + (run.leaseExpired ? " lapsed" : ""));
      const left = (100 * (run.startedAt - start)) / (end - start);
      const right = (100 * ((run.endedAt || timeline.now) - start)) / (end - start);
      bar.style.left = left + "%";
      bar.style.width = Math.max(0.5, right - left) + "%";
      bar.title =
        "Run " + short(run.id) + " (attempt " + run.attempt + ", generation " + run.generation +
        ") by " + visible(run.worker) + ": " + run.status +
        (run.leaseExpired ? " (its lease lapsed: no worker renews it)" : "") +
        ", " + localTime(run.startedAt) + (run.endedAt ? " to " + localTime(run.endedAt) : "");
      // In the accessibility tree, not only as a colour and a mouse's tooltip.
      bar.setAttribute("role", "img");
      bar.setAttribute("aria-label", bar.title);
      track.append(bar);
    }
    row.append(track);
    root.append(row);
  }
  if (!timeline.actions.length) root.append(el("p", "No Actions planned yet.", "muted"));
}

// The newest events (at most 100, within the answer's size): the note says whether
// older ones were left out, and where to read them (ADR-0136).
// Who caused an event, as the CLI's audit says it: a worker by its name, a person by
// the id a named token records (`user alice`; the column said only "user", found by
// the re-test of ADR-0143), the plain user and the coordinator by their kind.
function actorOf(event) {
  if (event.worker) return event.actor + " " + event.worker;
  const named = event.actorId && event.actorId !== event.actor;
  return named ? event.actor + " " + event.actorId : event.actor;
}

function renderAudit(audit) {
  const events = audit.events;
  $("audit-note").textContent = audit.more
    ? `(the newest ${events.length}; older ones with \`workcenter audit\`)`
    : `(all ${events.length} events)`;
  const body = $("audit").tBodies[0];
  body.replaceChildren();
  for (const event of events.slice().reverse()) {
    const tr = el("tr");
    tr.append(el("td", event.position));
    tr.append(el("td", localTime(event.time)));
    tr.append(el("td", event.type));
    tr.append(el("td", actorOf(event)));
    tr.append(el("td", short(event.actionId), "mono"));
    tr.append(el("td", short(event.runId), "mono"));
    const payload = JSON.stringify(event.payload);
    tr.append(el("td", payload.length > 160 ? clip(payload, 160) + "…" : payload, "mono"));
    body.append(tr);
  }
}

// --- what a screen reader is told ------------------------------------------------

// Changes that arrive over the change stream are said once, politely: a new reply of the
// Coordinator and a change of the item's status (found by acceptance testing: a screen
// reader heard neither, ADR-0142). An item's first read says nothing: it is on the page.
const said = { item: null, status: null, replies: new Set() };

function announce(words) {
  const region = $("announcer");
  region.textContent = "";
  // Set a moment later: text replaced at once in a live region may not be read again.
  setTimeout(() => {
    region.textContent = words;
  }, 50);
}

function sayChanges(id, status, messages) {
  const replies = messages.filter((m) => m.role === "assistant" && m.status !== "thinking");
  const words = [];
  if (said.item === id) {
    for (const m of replies) {
      if (said.replies.has(m.id)) continue;
      const text = m.status === "failed" ? "the turn failed." : visible(m.text || "");
      words.push(speaker(m) + ": " + clip(text, 300));
    }
    if (said.status !== status) words.push("Status " + status.replace(/_/g, " ") + ".");
  } else {
    said.replies = new Set();
  }
  for (const m of replies) said.replies.add(m.id);
  said.item = id;
  said.status = status;
  if (words.length) announce(words.join(" "));
}


// --- live updates ----------------------------------------------------------------

function schedule(delay = REFRESH_DELAY_MS) {
  if (state.timer === null) state.timer = setTimeout(refresh, delay);
}

async function refresh() {
  state.timer = null;
  if (state.refreshing) {
    schedule();
    return;
  }
  state.refreshing = true;
  const list = state.listDirty;
  const detail = state.detailDirty;
  state.listDirty = state.detailDirty = false;
  try {
    if (list) await refreshList();
    if (detail) await refreshDetail();
    if (state.retryMs !== RETRY_FIRST_MS) {
      state.retryMs = RETRY_FIRST_MS;
      if ($("live").textContent === READS_FAILING) setLive(true);
    }
  } catch (error) {
    if (error instanceof Unauthorized) return;
    console.warn("refresh failed", error);
    // Read again, later: the change that asked for this read is seen by no other (an
    // item read that failed once the network came back was never read again, the page
    // showing it as it was under a badge that said "live"; found by acceptance testing,
    // ADR-0138).
    state.listDirty = state.listDirty || list;
    state.detailDirty = state.detailDirty || detail;
    // Said where the badge says "live"; one that says why already ("database
    // unreachable", "reconnecting") is left saying it.
    if ($("live").classList.contains("on")) setLive(false, READS_FAILING);
    schedule(state.retryMs);
    state.retryMs = Math.min(state.retryMs * 2, RETRY_MAX_MS);
  } finally {
    state.refreshing = false;
  }
}

function onChange(change) {
  state.listDirty = true;
  if (change.workItemId === state.selected) state.detailDirty = true;
  schedule();
}

function setLive(on, words) {
  const live = $("live");
  live.textContent = words || (on ? "live" : "reconnecting");
  live.className = "live " + (on ? "on" : "off");
}

// A fetch-based EventSource: it can send the bearer token, and it resumes with
// Last-Event-ID after the last change it saw, so nothing is missed or seen twice.
async function follow() {
  for (;;) {
    try {
      const extra = { Accept: "text/event-stream" };
      if (state.lastEventId !== null) extra["Last-Event-ID"] = String(state.lastEventId);
      const response = await fetch("/api/stream", { headers: headers(extra), cache: "no-store" });
      if (response.status === 401) {
        askForToken();
        return;
      }
      if (response.status === 422) {
        // A position this store never sent (it was replaced): read everything again.
        state.lastEventId = null;
        await refreshList();
        continue;
      }
      if (!response.ok || !response.body) throw new Error("stream refused: " + response.status);
      setLive(true);
      // Changes made while the stream was down are in the next read.
      state.listDirty = state.detailDirty = true;
      schedule();
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          dispatch(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (error) {
      console.warn("stream interrupted", error);
    }
    setLive(false);
    await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
  }
}

function dispatch(block) {
  let id = null;
  let kind = "message";
  const data = [];
  for (const line of block.split("\n")) {
    // The server's word that the database cannot be read, and that it can again (the
    // stream stays open meanwhile): the badge said "live" throughout (ADR-0128).
    if (line === ": store unavailable") setLive(false, "database unreachable");
    if (line === ": store available") {
      setLive(true);
      state.listDirty = state.detailDirty = true;
      schedule();
    }
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "id") id = value;
    else if (field === "event") kind = value;
    else if (field === "data") data.push(value);
  }
  if (id !== null && /^\d+$/.test(id)) state.lastEventId = Number(id);
  if (kind === "change" && data.length) onChange(JSON.parse(data.join("\n")));
}

async function start() {
  try {
    await refreshList();
    state.detailDirty = true;
    await refresh();
  } catch (error) {
    if (error instanceof Unauthorized) return;
    console.warn("first read failed", error);
  }
  follow();
}

// Every script of the page (steering.js too) has run by then.
document.addEventListener("DOMContentLoaded", start);
