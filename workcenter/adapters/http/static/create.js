// The dashboard's create form: title, goal, criteria, delivery target, mode, stages,
// limits, and whether to start at once. The server judges every field; a refusal is
// shown in its words and the form keeps what the user typed.
// It uses dashboard.js's state and text.js's helpers (classic scripts of one page).
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

// The form's field for a refused field's place (``errors[].loc``, body first).
function createField(loc) {
  const [, name, limit] = loc || [];
  if (name === "limits" && limit) {
    return document.querySelector('#create-form input[data-limit="' + limit + '"]');
  }
  const ids = {
    title: "create-title",
    goal: "create-goal",
    acceptanceCriteria: "create-criteria",
    deliveryTarget: "create-delivery",
    mode: "create-mode",
    stages: "create-stages",
  };
  return ids[name] ? $(ids[name]) : null;
}

function clearRefusal() {
  $("create-error").hidden = true;
  for (const field of document.querySelectorAll("#create-form [aria-invalid]")) {
    field.removeAttribute("aria-invalid");
    field.removeAttribute("aria-describedby");
  }
}

// The refusal is said (the note is an alert) and tied to the fields it names, and the
// keyboard goes to the first of them, not to the page behind the dialog (found by
// acceptance testing: the focus was lost while Create was disabled, ADR-0142). Returns
// how many fields it named.
function createRefused(text, fields) {
  const error = $("create-error");
  error.textContent = visible(text);
  error.hidden = false;
  const named = (fields || []).map((f) => createField(f.loc)).filter(Boolean);
  for (const field of named) {
    field.setAttribute("aria-invalid", "true");
    field.setAttribute("aria-describedby", "create-error");
  }
  if (named.length) named[0].focus();
  return named.length;
}

async function createItem(event) {
  event.preventDefault();
  clearRefusal();
  // Create is disabled while the item is sent: the focus waits in the form meanwhile.
  const fromCreate = document.activeElement === $("create-submit");
  if (fromCreate) $("create-title").focus();
  $("create-submit").disabled = true;
  let backToCreate = false;
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
    const named = createRefused(
      failure instanceof Unauthorized ? tokenRefusal() : "Refused: " + (failure.message || failure),
      failure instanceof Problem ? failure.fields : [],
    );
    // A refusal that names no field (a stage given twice): back where it was sent from.
    backToCreate = fromCreate && !named;
  } finally {
    $("create-submit").disabled = false;
    if (backToCreate) $("create-submit").focus();
    state.listDirty = true;
    schedule();
  }
}

$("new-item").addEventListener("click", () => {
  clearRefusal();
  $("create-dialog").showModal();
  $("create-title").focus();
});
$("create-cancel").addEventListener("click", () => $("create-dialog").close());
$("create-form").addEventListener("submit", createItem);
