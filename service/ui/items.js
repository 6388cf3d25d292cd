// A batch's items, a page at a time (pages.js reads them): the controls that choose which, the table, the pager, and
// the rows on screen kept current as items finish (from the batch view's event stream).
import { badge, h, number, option, seconds, when } from "./dom.js";
import { readPage } from "./pages.js";
import { itemPanel } from "./panel.js";
import { FAILED, FINAL_ITEM_STATUSES } from "./statuses.js";

const REFRESH_MS = 1000; // at most one re-read of the page on screen per second while items finish
const COLUMNS = [
  ["#", "num"],
  ["Id", ""],
  ["Status", ""],
  ["Server", ""],
  ["Tool", ""],
  ["Call", "num"],
  ["Rate wait", "num opt"],
  ["Queued", "num opt"],
  ["Finished", "opt"],
  ["Tries", "num opt"],
  ["Error", "err"],
];

export function itemsTable(batchId, report) {
  const path = `v1/batches/${encodeURIComponent(batchId)}`;
  const view = { filter: "all", failedFirst: false, size: 50 }; // which items, how many a page
  const pager = { starts: [0], next: null }; // where each page from the first starts (the last: on screen); the next
  const state = { generation: 0, refresh: null, stopped: false, rendered: false, onScreen: new Map() };
  const panel = itemPanel(batchId, report);
  const controls = viewControls(view, () => {
    pager.starts = [0];
    load();
  });
  const rows = h("tbody");
  const where = h("span", { class: "where", id: "items-where" });
  const note = h("p", { class: "hint", id: "items-note" });
  const prev = h("button", { id: "prev", type: "button", onclick: () => move(-1) }, "‹ Previous");
  const after = h("button", { id: "next", type: "button", onclick: () => move(1) }, "Next ›");

  const element = h(
    "section",
    { class: "card" },
    h("div", { class: "bar" }, h("h2", {}, "Items"), controls),
    note,
    h(
      "div",
      { class: "scroll" },
      h(
        "table",
        { id: "items", class: "grid" },
        h("thead", {}, h("tr", {}, COLUMNS.map(([label, cls]) => h("th", { class: cls }, label)))),
        rows,
      ),
    ),
    h("div", { class: "pager" }, prev, where, after),
    panel.element,
  );

  function move(step) {
    if (step < 0 && pager.starts.length > 1) pager.starts.pop();
    else if (step > 0 && pager.next !== null) pager.starts.push(pager.next);
    load();
  }

  async function load() {
    clearTimeout(state.refresh);
    state.refresh = null;
    const mine = ++state.generation; // a page that arrives after another was asked for is dropped
    try {
      const page = await readPage(path, view, pager.starts.at(-1));
      if (!state.stopped && mine === state.generation) show(page);
    } catch (error) {
      if (!state.stopped) report(error);
    }
  }

  function show(page) {
    pager.next = page.next;
    state.onScreen = new Map();
    rows.replaceChildren(
      ...page.items.map((item) => {
        const tr = itemRow(item, () => panel.open(item.id));
        state.onScreen.set(item.index, tr);
        return tr;
      }),
    );
    if (!page.items.length) rows.append(h("tr", {}, h("td", { colSpan: COLUMNS.length, class: "empty" }, "No items here.")));
    prev.disabled = pager.starts.length === 1;
    after.disabled = pager.next === null;
    where.textContent = page.from === null ? `page ${pager.starts.length}` : span(page);
    note.textContent =
      page.from === null
        ? `Items that finished ${view.filter}, in the order they finished (items that never started are under “every item”).`
        : "";
    note.hidden = !note.textContent;
    if (!state.rendered) {
      state.rendered = true;
      performance.mark("mcp-batch:first-items"); // the page's load time, as the benchmark reads it
    }
  }

  // An item finished (from the event stream): its row shows the new status at once, and the page is read again
  // soon (for its timings and error), at most once a second however fast items finish.
  function touched(event) {
    const tr = state.onScreen.get(event.index);
    if (tr && view.filter === "all" && !view.failedFirst) {
      tr.dataset.status = event.status;
      tr.querySelector(".status-cell").replaceChildren(badge(event.status));
    }
    const matters =
      tr !== undefined ||
      view.failedFirst ||
      (view.filter === "failed" && FAILED.includes(event.status)) ||
      view.filter === event.status;
    if (matters && state.refresh === null && !state.stopped) state.refresh = setTimeout(load, REFRESH_MS);
  }

  // A running item's backend reported progress (from the event stream): the bar in its row, made or moved.
  function progressed(event) {
    const tr = state.onScreen.get(event.index);
    if (!tr || tr.dataset.status !== "running") return;
    tr.querySelector(".item-progress")?.remove();
    tr.querySelector(".status-cell").append(progressBar(event));
  }

  return {
    element,
    reload: load,
    touched,
    progressed,
    stop() {
      state.stopped = true;
      clearTimeout(state.refresh);
      panel.close();
      panel.stop();
    },
  };
}

// The filter, the "failed first" box and the page size, written into `view`; `changed()` after each change.
function viewControls(view, changed) {
  const update = (apply) => () => {
    apply();
    firstBox.disabled = view.filter !== "all";
    changed();
  };
  const filterSelect = h(
    "select",
    { id: "item-filter", onchange: update(() => (view.filter = filterSelect.value)) },
    option("all", "every item"),
    option("failed", "failed (any failure)"),
    FINAL_ITEM_STATUSES.map((s) => option(s)),
  );
  const firstBox = h("input", {
    id: "failed-first",
    type: "checkbox",
    onchange: update(() => (view.failedFirst = firstBox.checked)),
  });
  const sizeSelect = h(
    "select",
    { id: "page-size", onchange: update(() => (view.size = Number(sizeSelect.value))) },
    [25, 50, 100, 200].map((n) => option(String(n), `${n} a page`, n === view.size)),
  );
  return h(
    "div",
    { class: "controls" },
    h("label", {}, "Show ", filterSelect),
    h("label", { class: "check" }, firstBox, " failed first"),
    sizeSelect,
  );
}

function span(page) {
  const last = page.from + page.items.length;
  return `${number(page.items.length ? page.from + 1 : 0)}–${number(last)} of ${number(page.total)}`;
}

// A small bar of what a running item's backend last reported (without a total, one that only says it moves).
function progressBar(progress) {
  const done = progress.total ? `${number(progress.progress)} of ${number(progress.total)}` : number(progress.progress);
  const bar = h("progress", { class: "item-progress", title: progress.message ? `${done}: ${progress.message}` : done });
  if (progress.total) {
    bar.max = progress.total;
    bar.value = Math.min(progress.progress, progress.total);
  }
  return bar;
}

function itemRow(item, open) {
  return h(
    "tr",
    { class: "clickable", dataset: { index: item.index, status: item.status }, onclick: open },
    h("td", { class: "num" }, item.index),
    h("td", { class: "item-id", title: item.id }, item.id),
    h("td", { class: "status-cell" }, badge(item.status), item.progress && progressBar(item.progress)),
    h("td", {}, item.server),
    h("td", {}, item.tool),
    h("td", { class: "num" }, seconds(item.elapsed_seconds)),
    h("td", { class: "num opt" }, seconds(item.rate_wait_seconds)),
    h("td", { class: "num opt" }, seconds(item.queued_seconds)),
    h("td", { class: "opt" }, when(item.finished_at, true)),
    h("td", { class: "num opt" }, item.attempts ?? "–"),
    h("td", { class: "err", title: item.error?.message ?? "" }, item.error?.message ?? ""),
  );
}
