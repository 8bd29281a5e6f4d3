// The conversation with the Coordinator on the dashboard: its messages and turns, the
// verdict on each decision, and the user's message sent (dashboard.js reads and renders
// the selected item; this file draws its conversation).
"use strict";

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
