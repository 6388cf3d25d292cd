// The tenant's batches, newest first, a page at a time (GET /v1/batches), refreshed every few seconds.
import { json } from "./api.js";
import { badge, every, h, number, option, outcome, shortId, showOutcome, when } from "./dom.js";
import { BATCH_STATUSES } from "./statuses.js";

const REFRESH_MS = 2000;

export function batchesView(main, params, report) {
  const size = Math.min(Math.max(Number.parseInt(params.get("limit") ?? "", 10) || 20, 1), 1000);
  let status = params.get("status") ?? "";
  const cursors = [null]; // the cursor of each page back to the newest; the last one is on screen
  let nextCursor = null;
  let generation = 0; // a page that arrives after the filter or the page changed is dropped
  let stopped = false;

  const filter = h(
    "select",
    { id: "batch-filter", onchange: () => changed(() => (status = filter.value)) },
    option("", "every status", status === ""),
    BATCH_STATUSES.map((s) => option(s, s, s === status)),
  );
  const rows = h("tbody");
  const newer = h("button", { id: "newer", type: "button", onclick: () => changed(() => cursors.pop()) }, "‹ Newer");
  const older = h(
    "button",
    { id: "older", type: "button", onclick: () => changed(() => cursors.push(nextCursor)) },
    "Older ›",
  );
  const where = h("span", { class: "where" });

  main.append(
    h(
      "section",
      { class: "card" },
      h(
        "div",
        { class: "bar" },
        h("h1", {}, "Batches"),
        h("label", { class: "filter" }, "Status ", filter),
      ),
      h(
        "div",
        { class: "scroll" },
        h(
          "table",
          { id: "batches", class: "grid" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              h("th", {}, "Batch"),
              h("th", {}, "Status"),
              h("th", { class: "progress-col" }, "Progress"),
              h("th", { class: "num" }, "Finished"),
              h("th", {}, "Created"),
              h("th", { class: "opt" }, "Ended"),
              h("th", { class: "opt" }, "Retry of"),
            ),
          ),
          rows,
        ),
      ),
      h("div", { class: "pager" }, newer, where, older),
    ),
  );

  function changed(update) {
    update();
    generation += 1;
    poll.now();
  }

  async function load() {
    const mine = generation;
    const query = new URLSearchParams({ limit: String(size) });
    if (status) query.append("status", status);
    const cursor = cursors.at(-1);
    if (cursor) query.set("cursor", cursor);
    try {
      const page = await json(`v1/batches?${query}`);
      if (!stopped && mine === generation) show(page);
    } catch (error) {
      if (!stopped) report(error);
    }
  }

  function show(page) {
    nextCursor = page.next_cursor;
    newer.disabled = cursors.length === 1;
    older.disabled = !nextCursor;
    where.textContent = `page ${cursors.length}`;
    rows.replaceChildren(...page.batches.map(row));
    if (!page.batches.length) {
      rows.append(h("tr", {}, h("td", { colSpan: 7, class: "empty" }, status ? `No ${status} batches.` : "No batches yet.")));
    }
  }

  function row(batch) {
    const link = (id) => h("a", { href: `#/batch/${encodeURIComponent(id)}`, title: id }, h("code", {}, shortId(id)));
    return h(
      "tr",
      { dataset: { id: batch.id, status: batch.status } },
      h("td", {}, link(batch.id)),
      h("td", {}, badge(batch.status, batch.failed)),
      h(
        "td",
        { class: "progress-col" },
        showOutcome(outcome(), { total: batch.total, ok: batch.succeeded, failed: batch.failed, notRun: batch.not_run }),
      ),
      h("td", { class: "num" }, outcomeText(batch)),
      h("td", {}, when(batch.created_at)),
      h("td", { class: "opt" }, when(batch.finished_at)),
      h("td", { class: "opt" }, batch.retry_of ? link(batch.retry_of) : "–"),
    );
  }

  function outcomeText(batch) {
    const parts = [`${number(batch.succeeded)} ok`];
    if (batch.failed) parts.push(`${number(batch.failed)} failed`);
    if (batch.not_run) parts.push(`${number(batch.not_run)} not run`);
    return `${parts.join(", ")} · ${number(batch.finished)} / ${number(batch.total)}`;
  }

  const poll = every(REFRESH_MS, load);
  return {
    stop() {
      stopped = true;
      poll.stop();
    },
  };
}
