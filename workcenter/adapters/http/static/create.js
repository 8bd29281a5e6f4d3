// The dashboard's create form: title, goal, criteria, delivery target, mode, stages,
// limits, and whether to start at once. The server judges every field; a refusal is
// shown in its words and the form keeps what the user typed.
// It uses dashboard.js's state and helpers (both are classic scripts of one page).
"use strict";

// The form's create is sent with an id of its own until it succeeds: a submit again
// after a lost answer then answers the item the first one made, not a second one.
function newRequestId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}
let createRequestId = newRequestId();

function createBody() {
  const body = {
    title: $("create-title").value,
    goal: $("create-goal").value,
    acceptanceCriteria: $("create-criteria")
      .value.split("\n")
      .map((line) => line.trim())
      .filter(Boolean),
    mode: $("create-mode").value,
    start: $("create-start").checked,
    requestId: createRequestId,
  };
  const delivery = $("create-delivery").value;
  if (delivery) body.deliveryTarget = delivery;
  const stages = $("create-stages")
    .value.split(",")
    .map((stage) => stage.trim())
    .filter(Boolean);
  if (stages.length) body.stages = stages;
  const limits = {};
  for (const input of document.querySelectorAll("#create-form input[data-limit]")) {
    if (input.value.trim()) limits[input.dataset.limit] = Number(input.value.trim());
  }
  if (Object.keys(limits).length) body.limits = limits;
  return body;
}

function createRefused(text) {
  const error = $("create-error");
  error.textContent = visible(text);
  error.hidden = false;
}

async function createItem(event) {
  event.preventDefault();
  $("create-error").hidden = true;
  $("create-submit").disabled = true;
  try {
    const response = await checked(
      await fetch("/api/work-items", {
        method: "POST",
        headers: headers({ "Content-Type": "application/json" }),
        body: JSON.stringify(createBody()),
      }),
    );
    const item = await response.json();
    createRequestId = newRequestId();
    $("create-form").reset();
    $("create-dialog").close();
    select(item.id, true);
    showNote("Created " + item.title + " (" + item.status + ").", "ok");
  } catch (failure) {
    createRefused(
      failure instanceof Unauthorized ? tokenRefusal() : "Refused: " + (failure.message || failure),
    );
  } finally {
    $("create-submit").disabled = false;
    state.listDirty = true;
    schedule();
  }
}

$("new-item").addEventListener("click", () => {
  $("create-error").hidden = true;
  $("create-dialog").showModal();
  $("create-title").focus();
});
$("create-cancel").addEventListener("click", () => $("create-dialog").close());
$("create-form").addEventListener("submit", createItem);
