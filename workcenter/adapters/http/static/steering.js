// The dashboard's steering controls: cancel, resume, budget extend and retry a failed
// Action, each under If-Match with the ETag of the item as the page last read it.
// It uses dashboard.js's state and helpers (both are classic scripts of one page).
"use strict";

function setControls() {
  const detail = state.detail;
  const closed = !detail || detail.status === "done" || detail.status === "cancelled";
  const stopped = Boolean(detail && detail.executionControl && detail.executionControl.stopReason);
  const busy = state.commanding || !detail;
  $("cancel").disabled = busy || closed;
  $("resume").disabled = busy || !(detail && (detail.status === "cancelled" || stopped));
  $("extend").disabled = busy || !detail || detail.status === "done";
  for (const button of document.querySelectorAll("button.retry")) button.disabled = busy;
}

function showNote(text, kind) {
  const note = $("command-note");
  note.textContent = visible(text);
  note.className = "note " + kind;
  note.dataset.kind = kind;
  note.hidden = false;
}

// Every command sends the ETag of the item as the page shows it: if the item changed
// meanwhile the server answers 412 and writes nothing, and the page reads it again.
async function command(path, body, done) {
  const id = state.selected;
  if (!id || state.commanding) return;
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
    if (failure instanceof Unauthorized) return false;
    if (failure instanceof Problem && failure.status === 412) {
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

$("cancel").addEventListener("click", () =>
  command("/cancel", { reason: "cancelled from the dashboard" }, "Cancelled."),
);
$("resume").addEventListener("click", () => command("/resume", {}, "Resumed."));

$("extend-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const additions = {};
  const tokens = $("extend-tokens").value.trim();
  const requests = $("extend-requests").value.trim();
  if (tokens) additions.maxTokens = Number(tokens);
  if (requests) additions.maxRequests = Number(requests);
  // Nothing to add is the server's to refuse, so that the page says why.
  if (await command("/budget/extend", additions, "Budget extended.")) {
    $("extend-tokens").value = $("extend-requests").value = "";
  }
});

function retryButton(action) {
  const button = el("button", "Retry", "retry");
  button.type = "button";
  button.disabled = state.commanding;
  button.title = "Run this Action again (generation " + action.generation + ")";
  button.onclick = () =>
    command(
      "/actions/" + encodeURIComponent(action.id) + "/retry",
      { expectedGeneration: action.generation },
      "Action " + action.sequence + " retried.",
    );
  return button;
}
