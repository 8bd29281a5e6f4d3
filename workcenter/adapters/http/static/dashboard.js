// The Workcenter dashboard: reads the API, follows the change stream, shows the
// selected item's goal progress, budget, conversation with the Coordinator, Actions
// and Runs, and audit, and posts the user's messages; the item list is list.js's, the
// steering controls steering.js's and the create form create.js's.
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

// Text cut to at most `units` UTF-16 units between two characters as a reader sees them
// (an emoji, a letter and its accents, a joined family): slice() cut inside an emoji
// and left half of it (found by acceptance testing, ADR-0144).
const GRAPHEMES = Intl.Segmenter ? new Intl.Segmenter(undefined, { granularity: "grapheme" }) : null;

function clip(text, units) {
  if (text.length <= units) return text;
  if (!GRAPHEMES) return text.slice(0, /[\uDC00-\uDFFF]/.test(text[units]) ? units - 1 : units);
  let end = 0;
  for (const { index, segment } of GRAPHEMES.segment(text)) {
    if (index + segment.length > units) break;
    end = index + segment.length;
  }
  return text.slice(0, end);
}

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

const $ = (id) => document.getElementById(id);

// Control characters and the invisible marks that reorder text (bidi embeddings,
// overrides and isolates, LRM and RLM) are shown as escapes, as the terminal shows
// them: a title "\u202egnp.exe" must not read "exe.png". Newlines and tabs stay.
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

function visible(value) {
  return String(value).replace(UNSAFE, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff
      ? "\\x" + code.toString(16).padStart(2, "0")
      : "\\u" + code.toString(16).padStart(4, "0");
  });
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = visible(text);
  if (className) node.className = className;
  return node;
}

// A person's words in their own direction (dir="auto"), each path or address among them
// kept whole and left to right: in an Arabic title "/usr/local/bin/wc-123.py" was laid
// out in pieces (found by acceptance testing, ADR-0144).
const PATH_LIKE = /\S*[\/\\]\S*/g;

function setWords(node, text) {
  const shown = visible(text);
  node.textContent = "";
  node.dir = "auto";
  let last = 0;
  for (const found of shown.matchAll(PATH_LIKE)) {
    if (found.index > last) node.append(shown.slice(last, found.index));
    const path = document.createElement("bdi");
    path.dir = "ltr";
    path.textContent = found[0];
    node.append(path);
    last = found.index + found[0].length;
  }
  if (last < shown.length) node.append(shown.slice(last));
  return node;
}

function ownWords(tag, text, className) {
  return setWords(el(tag, null, className), text);
}

function short(id) {
  return id ? String(id).slice(0, 8) : "";
}

// A time as the reader's clock shows it, with its date: the audit said UTC and the
// conversation local time, neither with a date (found by acceptance testing, ADR-0137).
function localTime(time) {
  return new Date(time).toLocaleString();
}

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
    tr.append(el("td", event.worker ? event.actor + " " + event.worker : event.actor));
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

// --- the conversation with the Coordinator -----------------------------------------

function speaker(message) {
  if (message.role === "user") return "You";
  return (message.speaker || "Coordinator") + (message.automatic ? " (on its own)" : "");
}

// A Coordinator reply's verdict, and a link to its decision's provenance (ADR-0061).
function verdict(turn, base) {
  const request = turn.request || {};
  const charged = turn.attempts.reduce((sum, a) => sum + a.charged, 0);
  const span = el("span", turn.verdict.kind.replace(/_/g, " "), "verdict " + turn.verdict.kind);
  span.title = "saw item v" + request.item_version + ", ledger v" + request.ledger_version +
    "; " + turn.attempts.length + " attempt(s), " + charged + " tokens charged" +
    (turn.verdict.reason ? "; " + turn.verdict.reason : "");
  const link = el("a", "provenance", "provenance");
  link.href = base + "/decisions?turn=" + encodeURIComponent(turn.turn_id);
  link.target = "_blank";
  link.dataset.key = "provenance:" + turn.turn_id;
  link.setAttribute("aria-label", "provenance of this decision (opens a new tab)");
  return [span, link];
}

function renderMessage(message, turns, base) {
  const item = el("li", null, "msg " + message.role + " " + message.status);
  item.dataset.role = message.role;
  item.dataset.status = message.status;
  const head = el("div", null, "msg-head");
  head.append(el("span", speaker(message)));
  head.append(el("span", localTime(message.createdAt)));
  const turn = message.role === "assistant" && turns ? turns.get(message.turnId) : null;
  const shown = turn && turn.verdict.kind !== "thinking";
  // A failed turn's verdict says "failed" already.
  if (message.status !== "completed" && !(shown && turn.verdict.kind === message.status)) {
    head.append(el("span", message.status, "status " + message.status));
  }
  if (message.decision) {
    const kind = el("span", message.decision.kind.replace(/_/g, " "), "decision");
    kind.dataset.kind = message.decision.kind;
    kind.title = visible(message.decision.reason || "");
    head.append(kind);
  }
  if (shown) head.append(...verdict(turn, base));
  item.append(head);
  const body = message.status === "thinking" ? "thinking…" : message.text;
  if (body) item.append(ownWords("div", body, "msg-text"));
  const question = message.decision && message.decision.question;
  // Once: a reply's text often ends with its question (found by acceptance testing).
  if (question && !(body || "").includes(question)) {
    item.append(ownWords("div", question, "question"));
  }
  if (message.error) item.append(el("div", message.error, "failure"));
  return item;
}

// A dynamic item running with nothing planned waits for its Coordinator: the page says
// when only a person's message can move it on (ADR-0129).
const PLAN_WAIT = {
  due: "Nothing is planned yet: the Coordinator's next step is due.",
  retrying: "Nothing is planned yet: the Coordinator's last turn failed, and it tries" +
    " again after a pause (the Coordinator failures count toward the budget's limit).",
  failed: "Nothing is planned: the Coordinator's last turn failed and is not retried." +
    " Send a message to say what to do next.",
  idle: "Nothing is planned and no Coordinator step is due." +
    " Send a message to say what to do next.",
};

// Why Send is greyed out, "" when it is not.
function sendTitle(talk, closed, stopped) {
  if (closed) return "The item is " + talk.status + ": it takes no message";
  if (stopped) return "Stopped by its budget: the stop above says what lifts it";
  if (talk.thinking) return "The Coordinator is answering: a moment";
  return "";
}

function renderConversation(talk, decided, base) {
  const list = $("conversation");
  const atBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - 4;
  const turns = new Map((decided ? decided.turns : []).map((t) => [t.turn_id, t]));
  keepingFocus(list, () =>
    list.replaceChildren(...talk.messages.map((m) => renderMessage(m, turns, base))),
  );
  if (atBottom) list.scrollTop = list.scrollHeight;
  $("no-messages").hidden = talk.messages.length > 0;
  const closed = talk.status === "done" || talk.status === "cancelled";
  const notes = [];
  if (talk.omittedMessages) notes.push(talk.omittedMessages + " older not shown");
  if (talk.thinking) notes.push("the Coordinator is thinking");
  // Only an open item's Coordinator wakes (found by acceptance testing, ADR-0142).
  else if (talk.pendingWakes && !closed) notes.push(talk.pendingWakes + " wake(s) waiting");
  $("conversation-state").textContent = notes.length ? "(" + notes.join("; ") + ")" : "";
  const newest = talk.turns.length ? talk.turns[talk.turns.length - 1] : null;
  const retrying = talk.planWait === "due" && !talk.thinking && newest &&
    newest.status === "failed";
  const waits = PLAN_WAIT[retrying ? "retrying" : talk.planWait];
  $("plan-wait").hidden = !waits;
  $("plan-wait").textContent = waits || "";
  const control = state.detail && state.detail.executionControl;
  const stopped = Boolean(control && control.stopReason);
  const send = $("message-send");
  send.disabled = closed || talk.thinking || stopped;
  send.title = sendTitle(talk, closed, stopped);
  $("message-text").disabled = closed;
  // A refusal stays until the conversation changes after the read that followed it: its
  // cause (a turn thinking, a stop) may be gone by then (found by acceptance testing).
  const error = $("message-error");
  const seen = talk.conversationVersion + "|" + state.conversationEtag;
  if (!error.hidden) {
    if (state.messageErrorAt === null) state.messageErrorAt = seen;
    else if (state.messageErrorAt !== seen) error.hidden = true;
    // Refused as a turn was thinking, which has ended, perhaps before the read after.
    if (state.messageRefusedThinking && !talk.thinking) error.hidden = true;
  }
  markMessageRefused(!error.hidden);
}

// The message box, said to be invalid and described by its refusal until the refusal
// goes: a hidden refusal's text stayed the box's description (found by acceptance
// testing, ADR-0142).
function markMessageRefused(refused) {
  const box = $("message-text");
  if (refused) {
    box.setAttribute("aria-invalid", "true");
    box.setAttribute("aria-describedby", "message-error");
  } else {
    box.removeAttribute("aria-invalid");
    box.removeAttribute("aria-describedby");
  }
}

function clientMessageId() {
  if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
  return Date.now().toString(36) + "-" + Math.random().toString(36).slice(2);
}

async function sendMessage(event) {
  event.preventDefault();
  const id = state.selected;
  const text = $("message-text").value.trim();
  const error = $("message-error");
  if (!id || !text) return;
  if (!state.pendingMessage || state.pendingMessage.text !== text) {
    state.pendingMessage = { text, clientMessageId: clientMessageId() };
  }
  error.hidden = true;
  markMessageRefused(false);
  // The keyboard stays on the message: Send is disabled while it is sent, and the focus
  // on a disabled button went to the page's top (found by acceptance testing, ADR-0142).
  if (document.activeElement === $("message-send")) $("message-text").focus();
  $("message-send").disabled = true;
  try {
    const extra = { "Content-Type": "application/json", "If-Match": state.conversationEtag || "" };
    const body = JSON.stringify(state.pendingMessage);
    const path = "/api/work-items/" + encodeURIComponent(id) + "/messages";
    await checked(await fetch(path, { method: "POST", headers: headers(extra), body }));
    state.pendingMessage = null;
    $("message-text").value = "";
  } catch (failure) {
    $("message-send").disabled = false;
    if (failure instanceof Unauthorized) return;
    error.hidden = false;
    markMessageRefused(true);
    state.messageErrorAt = null;
    state.messageRefusedThinking = failure instanceof Problem && failure.status === 409 &&
      /turn is in progress/.test(failure.message);
    error.textContent = visible(
      failure instanceof Problem && failure.status === 412
        ? "The item changed since you read it: check what changed, then send again."
        : failure instanceof TypeError
          ? "The server could not be reached, so it is not known whether the message was" +
            " sent: send it again once the server answers (it is taken once)."
          : String(failure.message || failure),
    );
  } finally {
    // The next read shows the new turn (or what changed) and sets the button again.
    state.detailDirty = true;
    schedule();
  }
}

$("message-form").addEventListener("submit", sendMessage);

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
