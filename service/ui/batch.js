// One batch: its progress and counts moving with its event stream (no polling of the document), its items (items.js),
// and the actions on it: cancel, retry the unsuccessful items, download the results, delete it once it has ended.
import { Forbidden, NotFound, download, follow, json, request } from "./api.js";
import { badge, confirmAction, h, number, outcome, seconds, setNotice, showOutcome, when } from "./dom.js";
import { COUNTS, TERMINAL } from "./statuses.js";
import { itemsTable } from "./items.js";
import { questionsPanel } from "./questions.js";

export function batchView(main, id, report) {
  const stream = new AbortController();
  const path = `v1/batches/${encodeURIComponent(id)}`;
  let doc = null; // the document without results, as last read
  let stopped = false;

  const status = h("span", { id: "batch-status" });
  const bar = outcome({ id: "batch-progress" });
  const percent = h("span", { id: "batch-percent", class: "percent" });
  const cells = Object.fromEntries(COUNTS.map((name) => [name, h("dd", { dataset: { count: name } }, "–")]));
  const facts = h("dl", { class: "facts", id: "batch-facts" });
  const elapsed = h("dd", {}, "–");
  const cancel = h("button", { id: "cancel", type: "button", class: "danger", hidden: true, onclick: onCancel }, "Cancel");
  const retry = h("button", { id: "retry", type: "button", hidden: true, onclick: onRetry }, "Retry unsuccessful");
  const save = h("a", { id: "download", href: "#", onclick: onDownload }, "Download results (.jsonl)");
  const remove = h("button", { id: "delete", type: "button", class: "danger", hidden: true, onclick: onDelete }, "Delete");
  const items = itemsTable(id, report);
  const questions = questionsPanel(id, report);

  const head = h(
    "section",
    { class: "card" },
    h("div", { class: "bar" }, h("h1", {}, "Batch ", h("code", { class: "id" }, id)), status),
    h("div", { class: "progress-line" }, bar, percent),
    h("dl", { class: "counts", id: "counts" }, COUNTS.map((name) => h("div", {}, h("dt", {}, name), cells[name]))),
    facts,
    h("div", { class: "actions" }, cancel, retry, save, remove),
  );
  main.replaceChildren(head, questions.element, items.element);
  start();

  async function start() {
    try {
      doc = await json(`${path}?limit=0`);
    } catch (error) {
      if (stopped) return;
      if (error instanceof NotFound) return notFound();
      return report(error);
    }
    showDocument();
    items.reload();
    if (doc.counts.input_required) questions.refresh();
    if (!TERMINAL.has(doc.status)) listen();
  }

  function notFound() {
    main.replaceChildren(
      h(
        "section",
        { class: "card", id: "not-found" },
        h("h1", {}, "Batch not found"),
        h("p", {}, "No batch ", h("code", {}, id), " is visible with this key: it never existed, it has expired, or it is another tenant's."),
        h("p", {}, h("a", { href: "#/batches" }, "All batches")),
      ),
    );
  }

  // Items finished before the page opened are in the table already: the stream starts after them.
  async function listen() {
    const c = doc.counts;
    const after = c.succeeded + c.failed + c.skipped + c.cancelled + c.expired;
    try {
      await follow(`${path}/events?after=${after}`, onEvent, stream.signal);
    } catch (error) {
      if (!stopped) report(error);
    }
  }

  function onEvent(name, data) {
    if (name === "progress" || name === "end") {
      showProgress(data.status, data.counts);
    } else if (name === "item") {
      items.touched(data);
    } else if (name === "item_progress") {
      items.progressed(data);
    }
    if (name === "input_required" || (name === "progress" && questionsChanged(data.counts))) questions.refresh();
    if (name === "end") ended();
  }

  async function ended() {
    try {
      doc = await json(`${path}?limit=0`);
      if (!stopped) showDocument();
    } catch (error) {
      if (!stopped) report(error);
    }
    items.reload();
  }

  let waiting = 0; // items waiting for an answer, as last counted
  function questionsChanged(counts) {
    const changed = (counts.input_required ?? 0) !== waiting;
    waiting = counts.input_required ?? 0;
    return changed;
  }

  function showProgress(state, counts) {
    status.replaceChildren(badge(state, counts.failed));
    if (doc && !TERMINAL.has(state)) elapsed.textContent = seconds((Date.now() - Date.parse(doc.created_at)) / 1000);
    const done = counts.total - counts.pending - counts.running - (counts.input_required ?? 0);
    const notRun = (counts.skipped ?? 0) + (counts.cancelled ?? 0) + (counts.expired ?? 0);
    showOutcome(bar, { total: counts.total, ok: counts.succeeded, failed: counts.failed, notRun });
    const parts = [`${number(counts.succeeded)} ok`, `${number(counts.failed)} failed`, `${number(notRun)} not run`];
    percent.textContent = `${number(done)} of ${number(counts.total)} ended: ${parts.join(", ")}`;
    for (const name of COUNTS) cells[name].textContent = number(counts[name]);
    cancel.hidden = TERMINAL.has(state) || state === "cancelling";
    retry.hidden = !TERMINAL.has(state) || counts.succeeded === counts.total;
    remove.hidden = !TERMINAL.has(state);
    retry.textContent = `Retry ${number(counts.total - counts.succeeded)} unsuccessful`;
  }

  function showDocument() {
    elapsed.textContent = seconds(doc.elapsed_seconds);
    showProgress(doc.status, doc.counts);
    const fact = (label, value) => [h("dt", {}, label), h("dd", {}, value)];
    facts.replaceChildren(
      ...fact("Created", when(doc.created_at)),
      ...fact("Started", when(doc.started_at)),
      ...fact("Ended", when(doc.finished_at)),
      h("dt", {}, "Elapsed"),
      elapsed,
      ...fact("Mode", `${doc.mode}, on error ${doc.on_error}, ${doc.max_concurrency} at once`),
      ...(doc.retry_of ? fact("Retry of", h("a", { href: `#/batch/${encodeURIComponent(doc.retry_of)}`, id: "retry-of" }, doc.retry_of)) : []),
      ...(doc.deadline_at ? fact("Deadline", when(doc.deadline_at)) : []),
      ...(doc.expires_at ? fact("Expires", when(doc.expires_at)) : []),
      ...Object.entries(doc.metadata || {}).map(([key, value]) => fact(`Metadata ${key}`, h("span", { dataset: { meta: key } }, value))).flat(),
    );
  }

  async function onCancel() {
    const ok = await confirmAction("Cancel this batch? Nothing new starts; calls in flight finish or are cut.", "Cancel the batch");
    if (!ok || stopped) return;
    try {
      const answer = await json(`${path}/cancel`, { method: "POST" });
      showProgress(answer.status, answer.counts);
    } catch (error) {
      refused(cancel, error);
      report(error);
    }
  }

  async function onRetry() {
    const count = doc.counts.total - doc.counts.succeeded;
    const ok = await confirmAction(`Submit a new batch of the ${number(count)} items that did not succeed?`, "Retry them");
    if (!ok || stopped) return;
    try {
      const answer = await json(`${path}/retry`, { method: "POST" });
      location.hash = `#/batch/${encodeURIComponent(answer.id)}`;
    } catch (error) {
      report(error);
    }
  }

  async function onDelete() {
    const ok = await confirmAction("Delete this batch? Its calls and results are removed for good; a webhook not yet sent is dropped.", "Delete the batch");
    if (!ok || stopped) return;
    try {
      await request(path, { method: "DELETE" });
      location.hash = "#/batches";
    } catch (error) {
      refused(remove, error);
      report(error);
    }
  }

  // A key without the `write` right may not cancel or delete: the button stays, disabled, saying why.
  function refused(button, error) {
    if (!(error instanceof Forbidden)) return;
    button.disabled = true;
    button.title = error.message;
  }

  async function onDownload(event) {
    event.preventDefault();
    save.classList.add("busy");
    try {
      await download(`${path}/results`, `${id}.jsonl`);
    } catch (error) {
      report(error);
    } finally {
      save.classList.remove("busy");
    }
  }

  return {
    stop() {
      stopped = true;
      stream.abort();
      items.stop();
      setNotice(null);
    },
  };
}
