// The item list: newest first, a page at a time, filtered by status and searched over
// title and goal. Pages are cut by the server's cursor (the item a page starts after),
// so items created while the user reads page 3 do not shift it: only the first page
// grows, and it is the one that follows new items live.
// It uses dashboard.js's state and text.js's helpers (classic scripts of one page).
"use strict";

const PAGE_SIZE = 50;
const SEARCH_DELAY_MS = 250;
const SEARCH_CHARS = 200;

const listing = {
  after: null, // the cursor this page starts after (null: the newest page)
  back: [], // the cursors of the pages before, to go back to newer ones
  next: null, // the cursor of the next, older, page
  search: "",
  status: "",
  timer: null,
};

function listPath() {
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (listing.after) query.set("after", listing.after);
  if (listing.search) query.set("q", listing.search);
  if (listing.status) query.set("status", listing.status);
  return "/api/work-items?" + query.toString();
}

// A row is a list item holding one button: a screen reader says "list, N items", and
// the keyboard reaches and selects each row as a click does (found by acceptance testing:
// Tab went past every row, and later, rows that were buttons made no list, ADR-0142).
function itemRow(item) {
  const row = el("li");
  row.dataset.id = item.id;
  row.dataset.status = item.status;
  const button = el("button");
  button.type = "button";
  button.dataset.key = item.id;
  if (item.id === state.selected) {
    row.className = "selected";
    button.setAttribute("aria-current", "true"); // said, not only shown in blue
  }
  button.append(ownWords("span", item.title, "item-title"));
  const meta = el("span", null, "item-meta");
  const progress = item.goalProgress || {};
  const total = progress.totalCriteriaCount || 0;
  const done = progress.completedCriteriaCount || 0;
  meta.append(el("span", item.status, "status " + item.status));
  meta.append(el("span", done + "/" + total + " criteria"));
  const mini = el("span", null, "mini");
  const fill = el("span");
  fill.style.width = (total ? (100 * done) / total : 0) + "%";
  mini.append(fill);
  meta.append(mini);
  button.append(meta);
  button.onclick = () => select(item.id, true);
  row.append(button);
  return row;
}

async function refreshList() {
  const page = await api(listPath());
  if (state.lastEventId === null) state.lastEventId = page.position;
  listing.next = page.next;
  keepingFocus($("item-list"), () => $("item-list").replaceChildren(...page.items.map(itemRow)));
  const filtered = listing.search || listing.status;
  // The total counts the status, not the search: a search says what it found so far.
  const found = page.items.length + (page.next ? "+" : "");
  $("item-count").textContent = listing.search
    ? "(" + found + " found)"
    : page.total
      ? "(" + page.total + (listing.status ? " " + listing.status : "") + ")"
      : "";
  $("no-items").textContent = filtered ? "Nothing matches." : "No work items yet.";
  $("no-items").hidden = page.items.length > 0;
  $("newer").disabled = listing.back.length === 0;
  $("older").disabled = !listing.next;
  $("page-note").textContent = "page " + (listing.back.length + 1);
  // The newest item is shown until the user picks one; the selection then stays,
  // whatever page or filter the list shows.
  if (!state.chosen && !listing.after && !filtered && page.items.length) {
    if (page.items[0].id !== state.selected) select(page.items[0].id, false);
  }
}

function select(id, chosen) {
  if (id !== state.selected) {
    state.conversationEtag = state.pendingMessage = null;
    state.itemEtag = state.detail = null;
    $("message-error").hidden = true;
    $("command-note").hidden = true;
    $("message-send").disabled = true; // until this item's conversation is read
    closeActionForm();
    // Until its first read, not the previous item's detail under this one's name.
    state.behindReads = 0;
    $("detail").hidden = true;
    setControls();
  }
  state.selected = id;
  state.chosen = state.chosen || chosen;
  if (chosen) history.replaceState(null, "", "#" + encodeURIComponent(id));
  for (const row of $("item-list").children) {
    row.classList.toggle("selected", row.dataset.id === id);
    if (row.dataset.id === id) row.firstChild.setAttribute("aria-current", "true");
    else row.firstChild.removeAttribute("aria-current");
  }
  state.detailDirty = true;
  schedule();
}

function showPage(after, back) {
  listing.after = after;
  listing.back = back;
  state.listDirty = true;
  schedule();
}

// A link or an edited address naming another item selects it, as a reload would (found
// by acceptance testing: the page kept showing the item it had).
window.addEventListener("hashchange", () => {
  const id = idInAddress();
  if (id && id !== state.selected) select(id, true);
  if (!id) {
    // No item named: as a reload of this address, the newest is shown.
    state.chosen = false;
    state.listDirty = true;
    schedule();
  }
});

$("older").addEventListener("click", () => {
  if (listing.next) showPage(listing.next, listing.back.concat([listing.after]));
});
$("newer").addEventListener("click", () => {
  if (listing.back.length) showPage(listing.back[listing.back.length - 1], listing.back.slice(0, -1));
});

function filterChanged() {
  // The server's bound (200 characters), cut between characters (ADR-0144).
  listing.search = clip($("search").value.trim(), SEARCH_CHARS);
  listing.status = $("status-filter").value;
  showPage(null, []);
}

$("search").addEventListener("input", () => {
  clearTimeout(listing.timer);
  listing.timer = setTimeout(filterChanged, SEARCH_DELAY_MS);
});
$("status-filter").addEventListener("change", filterChanged);
$("list-filter").addEventListener("submit", (event) => {
  event.preventDefault();
  clearTimeout(listing.timer);
  filterChanged();
});
