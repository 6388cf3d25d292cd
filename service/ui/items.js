// A batch's items, one page at a time: never more than a page is read, whatever the batch's size.
//   every item, in index order    GET /v1/batches/{id}?offset=&limit=
//   failed ones (or failed first) the document's failed_indexes, read as pages of the document around them
//   one final status              GET /v1/batches/{id}/results?status=&after=  (finish order; the rest unread)
import { json, jsonLines } from "./api.js";
import { FAILED, badge, h, number, option, seconds, when } from "./dom.js";
import { itemPanel } from "./panel.js";

const STATUSES = ["ok", ...FAILED, "skipped", "cancelled", "expired"];
const GAP = 16; // failed items this close together are read in one page of the document
const REFRESH_MS = 1000; // at most one re-read of the page on screen per second while items finish

export function itemsTable(batchId, report) {
  const path = `v1/batches/${encodeURIComponent(batchId)}`;
  let filter = "all";
  let failedFirst = false;
  let size = 50;
  let starts = [0]; // where each page from the first one starts (an offset, or a seq for a status); last: on screen
  let next = null; // where the page after this one starts, if there is one
  let onScreen = new Map(); // index -> row, for the rows on screen
  let generation = 0;
  let refresh = null;
  let stopped = false;
  let rendered = false;

  const filterSelect = h(
    "select",
    { id: "item-filter", onchange: () => changed(() => (filter = filterSelect.value)) },
    option("all", "every item"),
    option("failed", "failed (any failure)"),
    STATUSES.map((s) => option(s)),
  );
  const firstBox = h("input", {
    id: "failed-first",
    type: "checkbox",
    onchange: () => changed(() => (failedFirst = firstBox.checked)),
  });
  const sizeSelect = h(
    "select",
    { id: "page-size", onchange: () => changed(() => (size = Number(sizeSelect.value))) },
    [25, 50, 100, 200].map((n) => option(String(n), `${n} a page`, n === size)),
  );
  const rows = h("tbody");
  const where = h("span", { class: "where", id: "items-where" });
  const note = h("p", { class: "hint", id: "items-note" });
  const prev = h("button", { id: "prev", type: "button", onclick: () => move(-1) }, "‹ Previous");
  const after = h("button", { id: "next", type: "button", onclick: () => move(1) }, "Next ›");
  const panel = itemPanel(batchId, report);

  const columns = [
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
  const element = h(
    "section",
    { class: "card" },
    h(
      "div",
      { class: "bar" },
      h("h2", {}, "Items"),
      h(
        "div",
        { class: "controls" },
        h("label", {}, "Show ", filterSelect),
        h("label", { class: "check" }, firstBox, " failed first"),
        sizeSelect,
      ),
    ),
    note,
    h(
      "div",
      { class: "scroll" },
      h(
        "table",
        { id: "items", class: "grid" },
        h("thead", {}, h("tr", {}, columns.map(([label, cls]) => h("th", { class: cls }, label)))),
        rows,
      ),
    ),
    h("div", { class: "pager" }, prev, where, after),
    panel.element,
  );

  function changed(update) {
    update();
    firstBox.disabled = filter !== "all";
    starts = [0];
    load();
  }

  function move(step) {
    if (step < 0 && starts.length > 1) starts.pop();
    else if (step > 0 && next !== null) starts.push(next);
    load();
  }

  async function load() {
    clearTimeout(refresh);
    refresh = null;
    const mine = ++generation;
    const start = starts.at(-1);
    try {
      let page;
      if (filter === "all" && !failedFirst) page = await everyItem(start);
      else if (filter === "all") page = await failedThenRest(start);
      else if (filter === "failed") page = await failedOnly(start);
      else page = await withStatus(start);
      if (!stopped && mine === generation) show(page);
    } catch (error) {
      if (!stopped) report(error);
    }
  }

  async function everyItem(offset) {
    const doc = await json(`${path}?offset=${offset}&limit=${size}`);
    const total = doc.counts.total;
    const end = offset + doc.results.length;
    return { items: doc.results, from: offset, total, next: end < total ? end : null };
  }

  async function failedOnly(offset) {
    const failed = (await json(`${path}?limit=0`)).failed_indexes;
    const items = await itemsAt(failed.slice(offset, offset + size));
    const end = offset + items.length;
    return { items, from: offset, total: failed.length, next: end < failed.length ? end : null };
  }

  // The failed items (index order), then every other item (index order): position `offset` of that sequence.
  async function failedThenRest(offset) {
    const doc = await json(`${path}?limit=0`);
    const failed = doc.failed_indexes;
    const total = doc.counts.total;
    const items = await itemsAt(failed.slice(offset, offset + size));
    if (items.length < size && offset + items.length >= failed.length) {
      items.push(...(await rest(failed, Math.max(0, offset - failed.length), size - items.length, total)));
    }
    const end = offset + items.length;
    return { items, from: offset, total, next: end < total ? end : null };
  }

  // `count` items that did not fail, from the `skip`-th of them on.
  async function rest(failed, skip, count, total) {
    const isFailed = new Set(failed);
    let index = skip;
    for (const f of failed) if (f <= index) index += 1; // the skip-th index that is not a failed one
    const found = [];
    while (found.length < count && index < total) {
      const doc = await json(`${path}?offset=${index}&limit=${Math.min(2 * (count - found.length) + GAP, 1000)}`);
      if (!doc.results.length) break;
      for (const item of doc.results) if (!isFailed.has(item.index) && found.length < count) found.push(item);
      index = doc.results_offset + doc.results.length;
    }
    return found;
  }

  async function withStatus(seq) {
    const query = new URLSearchParams({ status: filter, after: String(seq) });
    const { items, more } = await jsonLines(`${path}/results?${query}`, size);
    return { items, from: null, total: null, next: more ? items.at(-1).seq : null };
  }

  // The items at these indexes (ascending), each run of nearby ones read as one page of the document.
  async function itemsAt(indexes) {
    const runs = [];
    for (const index of indexes) {
      const run = runs.at(-1);
      if (run && index - run[1] <= GAP) run[1] = index;
      else runs.push([index, index]);
    }
    const wanted = new Set(indexes);
    const found = new Map();
    await Promise.all(
      runs.map(async ([first, last]) => {
        let offset = first;
        while (offset <= last) {
          const doc = await json(`${path}?offset=${offset}&limit=${last - offset + 1}`);
          if (!doc.results.length) break;
          for (const item of doc.results) if (wanted.has(item.index)) found.set(item.index, item);
          offset = doc.results_offset + doc.results.length;
        }
      }),
    );
    return indexes.filter((index) => found.has(index)).map((index) => found.get(index));
  }

  function show(page) {
    next = page.next;
    onScreen = new Map();
    rows.replaceChildren(...page.items.map(row));
    if (!page.items.length) {
      rows.append(h("tr", {}, h("td", { colSpan: columns.length, class: "empty" }, "No items here.")));
    }
    prev.disabled = starts.length === 1;
    after.disabled = next === null;
    if (page.from === null) {
      where.textContent = `page ${starts.length}`;
    } else {
      const last = page.from + page.items.length;
      where.textContent = `${number(page.items.length ? page.from + 1 : 0)}–${number(last)} of ${number(page.total)}`;
    }
    note.textContent =
      page.from === null
        ? `Items that finished ${filter}, in the order they finished (items that never started are under “every item”).`
        : "";
    note.hidden = !note.textContent;
    if (!rendered) {
      rendered = true;
      performance.mark("mcp-batch:first-items"); // the page's load time, as the benchmark reads it
    }
  }

  function row(item) {
    const tr = h(
      "tr",
      { class: "clickable", dataset: { index: item.index, status: item.status }, onclick: () => panel.open(item.id) },
      h("td", { class: "num" }, item.index),
      h("td", { class: "item-id", title: item.id }, item.id),
      h("td", { class: "status-cell" }, badge(item.status)),
      h("td", {}, item.server),
      h("td", {}, item.tool),
      h("td", { class: "num" }, seconds(item.elapsed_seconds)),
      h("td", { class: "num opt" }, seconds(item.rate_wait_seconds)),
      h("td", { class: "num opt" }, seconds(item.queued_seconds)),
      h("td", { class: "opt" }, when(item.finished_at, true)),
      h("td", { class: "num opt" }, item.attempts ?? "–"),
      h("td", { class: "err", title: item.error?.message ?? "" }, item.error?.message ?? ""),
    );
    onScreen.set(item.index, tr);
    return tr;
  }

  // An item finished (from the event stream): its row shows the new status at once, and the page is read again
  // soon (for its timings and error), at most once a second however fast items finish.
  function touched(event) {
    const tr = onScreen.get(event.index);
    if (tr && filter === "all" && !failedFirst) {
      tr.dataset.status = event.status;
      tr.querySelector(".status-cell").replaceChildren(badge(event.status));
    }
    const matters =
      tr !== undefined ||
      failedFirst ||
      (filter === "failed" && FAILED.includes(event.status)) ||
      filter === event.status;
    if (matters && refresh === null && !stopped) refresh = setTimeout(load, REFRESH_MS);
  }

  return {
    element,
    reload: load,
    touched,
    stop() {
      stopped = true;
      clearTimeout(refresh);
      panel.close();
      panel.stop();
    },
  };
}
