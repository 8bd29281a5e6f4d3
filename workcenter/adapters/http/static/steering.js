// The dashboard's steering controls: start a draft, cancel, resume, extend any limit
// that can stop an item, retry, guide or answer an Action, each under If-Match with
// the ETag of the item as the page last read it. A stop says which limit stopped the
// item and by how much, and the extend form is pre-filled with what it needs.
// It uses dashboard.js's state and text.js's helpers (classic scripts of one page).
"use strict";

const LIMIT_INPUTS = () => document.querySelectorAll("#extend-form input[data-limit]");
const number = (value) => Number(value || 0).toLocaleString();

const STOPPED_TITLE = "Stopped by its budget: resume the item first (the stop above says how)";

function stoppedNow() {
  const control = state.detail && state.detail.executionControl;
  return Boolean(control && control.stopReason);
}

// Why the page will not steer right now, "" when it will: nothing is steered while a
// command is answered, before the item is read, or while its detail is older than the
// item (ADR-0128): a click would echo stale versions.
function busyReason() {
  if (state.commanding) return "A command is being answered";
  if (!state.detail) return "The item is being read";
  if (state.behindReads > 0) return "The item's views are catching up: a moment";
  return "";
}

// Each control disabled says why in its title (found by acceptance testing: only the
// Action buttons did).
function setControl(id, why) {
  const control = $(id);
  control.disabled = Boolean(why);
  control.title = why;
}

function setControls() {
  const detail = state.detail;
  const status = detail ? detail.status : "";
  const closed = status === "done" || status === "cancelled";
  const control = (detail && detail.executionControl) || {};
  const stopped = Boolean(control.stopReason);
  const busy = busyReason();
  setControl("start", busy || (status === "draft" ? "" : "Only a draft is started"));
  setControl("cancel", busy || (closed ? "The item is " + status + ": nothing to cancel" : ""));
  // A done item keeps a late overrun's stop, and is never resumed (ADR-0133); a resume
  // the server says it would refuse is not offered (resumeNeeds, ADR-0096).
  let resume = "";
  if (status === "done") {
    resume = "The item is done: its work is finished, and it is not resumed";
  } else if (!(status === "cancelled" || stopped)) {
    resume = "Only a cancelled or stopped item is resumed";
  } else if (Object.keys(control.resumeNeeds || {}).length) {
    resume = "Extend first: the stop above says by how much";
  }
  setControl("resume", busy || resume);
  const spentNoMore = status === "done" ? "The item is done: nothing more is spent" : "";
  setControl("extend", busy || spentNoMore);
  setControl("action-send", busy);
  for (const button of document.querySelectorAll(".tl-label button")) {
    if (button.dataset.spent === "true") continue; // greyed out, saying why (ADR-0127)
    if (button.title === STOPPED_TITLE) continue;
    button.disabled = Boolean(busy);
  }
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
  const from = document.activeElement;
  $("command-note").hidden = true;
  state.commanding = true;
  setControls();
  try {
    const extra = { "Content-Type": "application/json", "If-Match": state.itemEtag || "" };
    const url = "/api/work-items/" + encodeURIComponent(id) + path;
    const response = await checked(
      await fetch(url, { method: "POST", headers: headers(extra), body: JSON.stringify(body) }),
    );
    state.commandsAnswered += 1;
    if (id === state.selected) state.itemEtag = response.headers.get("ETag");
    showNote(done, "ok");
    return true;
  } catch (failure) {
    if (failure instanceof Unauthorized) {
      showNote(tokenRefusal(), "refused");
    } else if (failure instanceof Problem && failure.status === 412) {
      showNote("The item changed meanwhile: reloaded. Check it, then try again.", "stale");
    } else if (failure instanceof TypeError) {
      // fetch's own failure: no answer came (the server stopped, the network), which is
      // no refusal; the command may or may not have been taken.
      showNote(
        "The server could not be reached, so it is not known whether this was done: the" +
          " page shows the item again once the server answers.",
        "stale",
      );
    } else {
      showNote("Refused: " + (failure.message || failure), "refused");
    }
    return false;
  } finally {
    // The controls wait for the read that follows: a click before it would echo the
    // ETag that was just refused. A refresh already under way (begun before the answer)
    // is waited out first, so that this one reads the item as the command left it.
    state.listDirty = state.detailDirty = true;
    while (state.refreshing) await new Promise((done) => setTimeout(done, 20));
    await refresh();
    state.commanding = false;
    setControls();
    focusAfter(from);
  }
}

// The control a command came from is disabled while it is answered, which sends the
// keyboard's focus to the page (found by acceptance testing, ADR-0137): it gets it back,
// or, gone or disabled now (Start once started), the note saying what happened does.
// Focus the user moved elsewhere meanwhile stays there.
function focusAfter(from) {
  const lost = document.activeElement === document.body || document.activeElement === null;
  if (!lost || !from || from === document.body) return;
  const again = from.isConnected ? from : findKey(from.dataset && from.dataset.key);
  if (again && !again.disabled && again.offsetParent !== null) again.focus();
  else if (!$("command-note").hidden) $("command-note").focus();
}

function findKey(key) {
  if (!key) return null;
  return [...document.querySelectorAll("[data-key]")].find((n) => n.dataset.key === key) || null;
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
  // Said here in the page's words: the server's ("additions must be a non-empty
  // mapping ...") is the API's, for programs.
  if (!Object.keys(additions).length) {
    showNote("Enter an amount to add to at least one limit, then Extend.", "refused");
    return;
  }
  if (await command("/budget/extend", additions, "Budget extended.")) {
    for (const input of LIMIT_INPUTS()) input.value = "";
  }
});

// --- what stopped the item, and what lifts the stop ------------------------------

// The least addition to a limit before a resume is taken, as the ledger says it
// (executionControl.resumeNeeds, ADR-0096): 0 once the limit allows a resume.
function needOf(control, limit) {
  return (control.resumeNeeds || {})[limit] || 0;
}

// Each stop code: the limit it ran into, what the item used of it, the least addition
// after which a resume is accepted (and the refused request fits), and what to pre-fill
// when that least is not enough to go on with (ADR-0091).
const STOPS = {
  work_item_tokens_exhausted(control, stop) {
    const charged = control.usage.chargedTokens || 0;
    const max = control.limits.maxTokens || 0;
    const asked = stop.estimatedNextTokens || 0;
    const need = needOf(control, "maxTokens");
    const refused = asked ? "; the refused request needed " + number(asked) + " tokens" : "";
    // A Coordinator's next request is a little larger than the refused one: the least
    // would stop the item again at once, so the field holds room for one more as well.
    const suggest = need > 0 && asked ? need + asked : need;
    // Raised by the least only: a resume is taken, and the next request is refused.
    const more = asked ? charged + 2 * asked - max : 0;
    const tight =
      need === 0 && more > 0
        ? " Its limit now lets the refused request through, but not the next one: extend" +
          " tokens by " + number(more) + " more before you Resume."
        : "";
    return {
      limit: "maxTokens",
      need,
      suggest,
      tight,
      text: "the token limit: " + number(charged) + " of " + number(max) + " tokens charged" + refused,
    };
  },
  work_item_requests_exhausted(control) {
    const made = control.usage.llmRequestCount || 0;
    const max = control.limits.maxRequests || 0;
    return {
      limit: "maxRequests",
      need: needOf(control, "maxRequests"),
      text: "the LLM request limit: " + number(made) + " of " + number(max) + " requests made",
    };
  },
  run_requests_exhausted(control) {
    const max = control.limits.maxRunRequests || 0;
    // The page's advice, not the ledger's rule: a resume is taken without it, but the
    // next Run starts its count afresh and would likely stop at the same limit.
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
      need: needOf(control, "maxActionAttempts"),
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
      need: needOf(control, "maxCoordinatorFailures"),
      // The count never goes back down: not "in a row".
      text:
        "the Coordinator failure limit: the Coordinator failed " +
        (failures === 1 ? "once" : number(failures) + " times") +
        " (limit " + number(max) + ")",
    };
  },
};

// The limits a resume needs raised besides the stopping one: a token stop's turns may
// have used up the Coordinator's failures too (ADR-0091).
function alsoSpent(control, limit) {
  return Object.entries(control.resumeNeeds || {})
    .filter(([name]) => name !== limit)
    .map(([name, need]) => ({ limit: name, need }));
}

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
    if (state.prefilledStop !== null) {
      // Lifted (perhaps from another tab): nothing stays pre-filled for a second raise.
      for (const input of LIMIT_INPUTS()) input.value = "";
    }
    state.prefilledStop = null;
    return;
  }
  const explain = STOPS[stop.code];
  node.dataset.code = stop.code;
  if (!explain) {
    node.textContent = visible("Stopped: " + stop.code);
    return;
  }
  const { limit, need, text, suggest = need, tight = "" } = explain(control, stop);
  if (state.detail && state.detail.status === "done") {
    // A Run's usage settled after the item was done: the stop only blocks spending.
    node.textContent = visible(
      "Stopped by " + text + " after the item was done: its work is finished, and it is not resumed.",
    );
    return;
  }
  const also = alsoSpent(control, limit);
  node.dataset.limit = limit;
  node.dataset.need = String(need);
  node.dataset.also = also.map((a) => a.limit).join(" ");
  // Once the limit was raised enough (need 0), the stop stays until the resume: say so.
  const room =
    suggest > need ? " (" + number(suggest) + " leaves room for one more such request)" : "";
  const others = also.map((a) => LIMIT_WORDS[a.limit] + " by at least " + number(a.need));
  let lifted;
  if (need > 0) {
    const first = " Extend " + LIMIT_WORDS[limit] + " by at least " + number(need) + room;
    lifted = [first, ...others].join(" and ") + ", then Resume.";
  } else if (others.length) {
    lifted = " Its limit now allows it; extend " + others.join(" and ") + " too, then Resume.";
  } else {
    lifted = tight || " Its limit now allows it: Resume.";
  }
  node.textContent = visible("Stopped by " + text + "." + lifted);
  // Pre-filled once per stop and per need: a live update must not overwrite what the
  // user typed, unless what is needed changed (another limit now needs raising, or a
  // raise elsewhere met part or all of it: what was pre-filled would raise it again).
  const key = [stop.code + "@" + stop.at, node.dataset.also, need, suggest].join("|");
  if (state.prefilledStop !== key) {
    state.prefilledStop = key;
    const fill = Object.fromEntries(also.map((a) => [a.limit, a.need]));
    if (need > 0) fill[limit] = suggest;
    for (const input of LIMIT_INPUTS()) {
      input.value = input.dataset.limit in fill ? String(fill[input.dataset.limit]) : "";
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

// The server says when an Action has no attempt left for these verbs (noAttemptLeft):
// each would be refused until its attempts are extended, so they are greyed out and
// say why, rather than refused on a click (ADR-0127).
const NO_ATTEMPT_LEFT = "No attempt left: Extend its Action attempts first";

function actionButton(label, className, onclick, title, spent, where, action) {
  const button = el("button", label, className);
  button.type = "button";
  // Told apart in a screen reader's list of buttons, and found again once the timeline
  // is drawn anew (``keepingFocus``).
  button.setAttribute("aria-label", label + " " + where);
  button.dataset.key = className + ":" + action.id;
  button.dataset.spent = String(Boolean(spent));
  button.disabled = Boolean(busyReason()) || Boolean(spent);
  button.title = visible(spent ? NO_ATTEMPT_LEFT : title);
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
  const spent = action.noAttemptLeft;
  const button = (label, className, onclick, title) =>
    buttons.push(actionButton(label, className, onclick, title, spent, where, action));
  if (action.status === "failed") {
    const again = "Run this Action again (generation " + action.generation + ")";
    button("Retry", "retry", () => retryAction(action, "", "retried"), again);
    button("Guide", "guide", open("retry"), "Run it again with your guidance");
  } else if (action.status === "waiting") {
    button("Answer", "answer", open("answer"), "Answer its question");
  } else if (action.status === "ready" || action.status === "running") {
    if (stoppedNow()) {
      // Refused while stopped, in words that did not say so (found by acceptance testing).
      const guide = actionButton("Guide", "guide", open("guide"), "", false, where, action);
      guide.disabled = true;
      guide.title = STOPPED_TITLE;
      buttons.push(guide);
    } else {
      button("Guide", "guide", open("guide"), "A new generation with your guidance");
    }
  }
  if (spent && buttons.length) {
    const why = el("span", "no attempt left", "muted spent");
    why.title = NO_ATTEMPT_LEFT;
    buttons.push(why);
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
};

function openActionForm(action, kind, where) {
  const opener = document.activeElement;
  state.actionForm = { action, kind, opener: opener && opener.dataset ? opener.dataset.key : null };
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

// Escape closes the form and the keyboard is back on the button that opened it (found
// by acceptance testing, ADR-0137: only Close closed it, and focus went to the page).
function dismissActionForm() {
  const opener = state.actionForm && findKey(state.actionForm.opener);
  closeActionForm();
  if (opener && !opener.disabled) opener.focus();
}

// The open form's Action changed meanwhile (retried in another tab, say): a send would
// be refused in words that do not say so, so the form is closed and the page says why.
function checkActionForm(timeline) {
  const open = state.actionForm;
  if (!open || state.commanding) return; // a command's own change is said by the command
  const now = timeline.actions.find((a) => a.id === open.action.id);
  if (now && now.generation === open.action.generation && now.status === open.action.status) {
    return;
  }
  closeActionForm();
  showNote(
    "Action " + open.action.sequence + " changed meanwhile (" + (now ? now.status : "gone") +
      "): nothing was sent. Check it, then try again.",
    "stale",
  );
}

$("action-close").addEventListener("click", dismissActionForm);
$("action-form").addEventListener("keydown", (event) => {
  if (event.key === "Escape") {
    event.preventDefault();
    dismissActionForm();
  }
});
$("action-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const open = state.actionForm;
  const text = $("action-text").value.trim();
  if (!open) return;
  if (!text) {
    // Sent blank, a guide retried the Action without words and said it was guided (found
    // by acceptance testing): the form stays open, nothing is sent.
    showNote("Write your " + (open.kind === "answer" ? "answer" : "guidance") +
      " first: nothing was sent.", "refused");
    return;
  }
  const action = open.action;
  const sent =
    open.kind === "guide"
      ? await command(
          "/actions/" + encodeURIComponent(action.id) + "/guide",
          { guidance: text, expectedGeneration: action.generation },
          "Action " + action.sequence + " guided.",
        )
      : await retryAction(action, text, ACTION_FORMS[open.kind].done);
  if (sent) closeActionForm();
});
