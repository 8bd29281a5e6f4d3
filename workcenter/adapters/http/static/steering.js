// The dashboard's steering controls: start a draft, cancel, resume, extend any limit
// that can stop an item, retry, guide or answer an Action, each under If-Match with
// the ETag of the item as the page last read it. A stop says which limit stopped the
// item and by how much, and the extend form is pre-filled with what it needs.
// It uses dashboard.js's state and helpers (both are classic scripts of one page).
"use strict";

const LIMIT_INPUTS = () => document.querySelectorAll("#extend-form input[data-limit]");
const number = (value) => Number(value || 0).toLocaleString();

function setControls() {
  const detail = state.detail;
  const closed = !detail || detail.status === "done" || detail.status === "cancelled";
  const stopped = Boolean(detail && detail.executionControl && detail.executionControl.stopReason);
  const busy = state.commanding || !detail;
  $("start").disabled = busy || !(detail && detail.status === "draft");
  $("cancel").disabled = busy || closed;
  $("resume").disabled = busy || !(detail && (detail.status === "cancelled" || stopped));
  $("extend").disabled = busy || !detail || detail.status === "done";
  $("action-send").disabled = busy;
  for (const button of document.querySelectorAll(".tl-label button")) button.disabled = busy;
}

function showNote(text, kind) {
  const note = $("command-note");
  note.textContent = visible(text);
  note.className = "note " + kind;
  note.dataset.kind = kind;
  note.hidden = false;
}

function tokenRefusal() {
  return state.token
    ? "Refused: the server did not accept the API token you gave (401). Enter it again above."
    : "Refused: this server needs its API token (401). Enter it above.";
}

// Every command sends the ETag of the item as the page shows it: if the item changed
// meanwhile the server answers 412 and writes nothing, and the page reads it again.
async function command(path, body, done) {
  const id = state.selected;
  if (!id || state.commanding) return false;
  $("command-note").hidden = true;
  state.commanding = true;
  setControls();
  try {
    const extra = { "Content-Type": "application/json", "If-Match": state.itemEtag || "" };
    const url = "/api/work-items/" + encodeURIComponent(id) + path;
    const response = await checked(
      await fetch(url, { method: "POST", headers: headers(extra), body: JSON.stringify(body) }),
    );
    if (id === state.selected) state.itemEtag = response.headers.get("ETag");
    showNote(done, "ok");
    return true;
  } catch (failure) {
    if (failure instanceof Unauthorized) {
      showNote(tokenRefusal(), "refused");
    } else if (failure instanceof Problem && failure.status === 412) {
      showNote("The item changed meanwhile: reloaded. Check it, then try again.", "stale");
    } else {
      showNote("Refused: " + (failure.message || failure), "refused");
    }
    return false;
  } finally {
    // The controls wait for the read that follows: a click before it would echo the
    // ETag that was just refused.
    state.listDirty = state.detailDirty = true;
    await refresh();
    state.commanding = false;
    setControls();
  }
}

$("start").addEventListener("click", () => command("/start", {}, "Started."));
$("cancel").addEventListener("click", () =>
  command("/cancel", { reason: "cancelled from the dashboard" }, "Cancelled."),
);
$("resume").addEventListener("click", () => command("/resume", {}, "Resumed."));

$("extend-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const additions = {};
  for (const input of LIMIT_INPUTS()) {
    const value = input.value.trim();
    if (value) additions[input.dataset.limit] = Number(value);
  }
  // Nothing to add is the server's to refuse, so that the page says why.
  if (await command("/budget/extend", additions, "Budget extended.")) {
    for (const input of LIMIT_INPUTS()) input.value = "";
  }
});

// --- what stopped the item, and what lifts the stop ------------------------------

// Each stop code: the limit it ran into, what the item used of it, the least addition
// after which a resume is accepted (and the refused request fits), and what to pre-fill
// when that least is not enough to go on with (ADR-0091).
const STOPS = {
  work_item_tokens_exhausted(control, stop) {
    const charged = control.usage.chargedTokens || 0;
    const max = control.limits.maxTokens || 0;
    const asked = stop.estimatedNextTokens || 0;
    const need = Math.max(charged + asked - max, charged - max + 1, 0);
    const refused = asked ? "; the refused request needed " + number(asked) + " tokens" : "";
    // A Coordinator's next request is a little larger than the refused one: the least
    // would stop the item again at once, so the field holds room for one more as well.
    const suggest = need > 0 && asked ? need + asked : need;
    return {
      limit: "maxTokens",
      need,
      suggest,
      text: "the token limit: " + number(charged) + " of " + number(max) + " tokens charged" + refused,
    };
  },
  work_item_requests_exhausted(control) {
    const made = control.usage.llmRequestCount || 0;
    const max = control.limits.maxRequests || 0;
    return {
      limit: "maxRequests",
      need: Math.max(made - max + 1, 0),
      text: "the LLM request limit: " + number(made) + " of " + number(max) + " requests made",
    };
  },
  run_requests_exhausted(control) {
    const max = control.limits.maxRunRequests || 0;
    return {
      limit: "maxRunRequests",
      need: 1,
      text: "the per-Run request limit: a Run made all " + number(max) + " LLM requests it may",
    };
  },
  action_attempts_exhausted(control, stop) {
    // The Action's attempts as they are now: the stop's own figures are those of the
    // moment it stopped, before any extension.
    const now = (control.actionAttempts || []).find((a) => a.actionId === stop.actionId) || {};
    const used = now.attempts ?? stop.attempts ?? 0;
    const allowed = now.effectiveMaxAttempts ?? stop.effectiveMaxAttempts ?? 0;
    return {
      limit: "maxActionAttempts",
      need: Math.max(used - allowed + 1, 0),
      text:
        "the Action attempt limit: " + actionName(stop.actionId) + " used " + number(used) +
        " of " + number(allowed) + " attempts",
    };
  },
  coordinator_failures_exhausted(control, stop) {
    const failures = stop.failures || control.coordinatorFailures || 0;
    const max = control.limits.maxCoordinatorFailures || 0;
    return {
      limit: "maxCoordinatorFailures",
      need: Math.max(failures - max + 1, 0),
      text:
        "the Coordinator failure limit: the Coordinator failed " + number(failures) +
        " times in a row (limit " + number(max) + ")",
    };
  },
};

const LIMIT_WORDS = {
  maxTokens: "tokens",
  maxRequests: "LLM requests",
  maxRunRequests: "Run requests",
  maxActionAttempts: "Action attempts",
  maxCoordinatorFailures: "Coordinator failures",
};

function renderStop(control) {
  const node = $("budget-stop");
  const stop = control && control.stopReason;
  node.hidden = !stop;
  if (!stop) {
    node.textContent = "";
    node.removeAttribute("data-code");
    state.prefilledStop = null;
    return;
  }
  const explain = STOPS[stop.code];
  node.dataset.code = stop.code;
  if (!explain) {
    node.textContent = visible("Stopped: " + stop.code);
    return;
  }
  const { limit, need, text, suggest = need } = explain(control, stop);
  node.dataset.limit = limit;
  node.dataset.need = String(need);
  // Once the limit was raised enough (need 0), the stop stays until the resume: say so.
  const room =
    suggest > need ? " (" + number(suggest) + " leaves room for one more such request)" : "";
  const lifted =
    need > 0
      ? " Extend " + LIMIT_WORDS[limit] + " by at least " + number(need) + room + ", then Resume."
      : " Its limit now allows it: Resume.";
  node.textContent = visible("Stopped by " + text + "." + lifted);
  // Pre-filled once per stop: a live update must not overwrite what the user typed.
  const key = stop.code + "@" + stop.at;
  if (state.prefilledStop !== key) {
    state.prefilledStop = key;
    for (const input of LIMIT_INPUTS()) {
      input.value = input.dataset.limit === limit && need > 0 ? String(suggest) : "";
    }
  }
}

// --- an Action's retry, guidance and answer ---------------------------------------

function actionReason(action) {
  const progress = (state.detail && state.detail.goalProgress) || {};
  const blocker = (progress.blockers || []).find((b) => b.actionId === action.id);
  if (blocker && blocker.reason) return blocker.reason;
  const entry = ((state.detail && state.detail.actions) || []).find((a) => a.id === action.id);
  return (entry && (entry.waitingReason || entry.failureReason)) || "";
}

function actionButton(label, className, onclick, title) {
  const button = el("button", label, className);
  button.type = "button";
  button.disabled = state.commanding;
  button.title = visible(title);
  button.onclick = onclick;
  return button;
}

// A failed Action is guided as the lifecycle allows: retried with the user's words as
// its input (guidance proper is for a ready or running Action); a waiting one is
// answered the same way.
function actionButtons(action) {
  const buttons = [];
  const where = "Action " + action.sequence + " (" + action.type + ", " + action.status + ")";
  const open = (kind) => () => openActionForm(action, kind, where);
  if (action.status === "failed") {
    const again = "Run this Action again (generation " + action.generation + ")";
    buttons.push(actionButton("Retry", "retry", () => retryAction(action, "", "retried"), again));
    buttons.push(actionButton("Guide", "guide", open("retry"), "Run it again with your guidance"));
  } else if (action.status === "waiting") {
    buttons.push(actionButton("Answer", "answer", open("answer"), "Answer its question"));
  } else if (action.status === "ready" || action.status === "running") {
    buttons.push(actionButton("Guide", "guide", open("guide"), "A new generation with your guidance"));
  }
  if (action.status === "running") {
    const queue = "Words for its running Run, which goes on (guidance starts it again)";
    buttons.push(actionButton("Input", "input", open("input"), queue));
  }
  return buttons;
}

function retryAction(action, words, done) {
  const body = { expectedGeneration: action.generation };
  if (words) body.answer = words;
  const path = "/actions/" + encodeURIComponent(action.id) + "/retry";
  return command(path, body, "Action " + action.sequence + " " + done + ".");
}

const ACTION_FORMS = {
  answer: { verb: "Answer ", done: "answered" },
  retry: { verb: "Guide (retry with your words) ", done: "retried with your guidance" },
  guide: { verb: "Guide ", done: "guided" },
  input: { verb: "Input to the running Run of " },
};

// Input for a running Action goes to the Run the page shows running: if another took
// its place meanwhile, the server refuses it rather than hand it to a Run not asked.
function sendInput(action, text) {
  const run = (action.runs || []).find((r) => r.status === "running");
  const body = { text, expectedGeneration: action.generation };
  if (run) body.expectedRunId = run.id;
  const path = "/actions/" + encodeURIComponent(action.id) + "/input";
  return command(path, body, "Action " + action.sequence + ": input queued.");
}

function openActionForm(action, kind, where) {
  state.actionForm = { action, kind };
  const question = actionReason(action);
  const label = ACTION_FORMS[kind].verb + where + (question ? ": " + question : "");
  $("action-form-label").textContent = visible(label);
  $("action-form").dataset.kind = kind;
  $("action-form").hidden = false;
  $("action-text").value = "";
  $("action-text").focus();
}

function closeActionForm() {
  state.actionForm = null;
  $("action-form").hidden = true;
}

$("action-close").addEventListener("click", closeActionForm);
$("action-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const open = state.actionForm;
  const text = $("action-text").value.trim();
  if (!open) return;
  const action = open.action;
  let sent;
  if (open.kind === "guide") {
    sent = await command(
      "/actions/" + encodeURIComponent(action.id) + "/guide",
      { guidance: text, expectedGeneration: action.generation },
      "Action " + action.sequence + " guided.",
    );
  } else if (open.kind === "input") {
    sent = await sendInput(action, text);
  } else {
    sent = await retryAction(action, text, ACTION_FORMS[open.kind].done);
  }
  if (sent) closeActionForm();
});
