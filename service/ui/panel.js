// One item, whole, in a side panel (GET /v1/batches/{id}/items/{item_id}); content larger than one response comes
// a page at a time through the route's next_cursor.
import { NotFound, json } from "./api.js";
import { badge, h, seconds, when } from "./dom.js";

export function itemPanel(batchId, report) {
  const title = h("h2", { id: "panel-title" });
  const body = h("div", { class: "panel-body", id: "panel-body" });
  const more = h("button", { id: "panel-more", type: "button", hidden: true }, "More content");
  const close = h("button", { id: "panel-close", type: "button", class: "link", onclick: hide }, "Close");
  const panel = h(
    "aside",
    { id: "item-panel", class: "panel", hidden: true, "aria-labelledby": "panel-title" },
    h("div", { class: "bar" }, title, close),
    body,
    more,
  );
  let generation = 0;
  let cursor = null;
  let itemPath = null;

  document.addEventListener("keydown", onKey);
  more.addEventListener("click", () => page(generation));

  function onKey(event) {
    if (event.key === "Escape" && !panel.hidden) hide();
  }

  function hide() {
    generation += 1;
    panel.hidden = true;
  }

  async function open(itemId) {
    const mine = ++generation;
    itemPath = `v1/batches/${encodeURIComponent(batchId)}/items/${encodeURIComponent(itemId)}`;
    cursor = null;
    title.textContent = `Item ${itemId}`;
    body.replaceChildren(h("p", { class: "hint" }, "Loading…"));
    more.hidden = true;
    panel.hidden = false;
    let item;
    try {
      item = await json(itemPath);
    } catch (error) {
      if (mine !== generation) return;
      if (error instanceof NotFound) body.replaceChildren(h("p", { class: "error" }, "Item not found."));
      else report(error);
      return;
    }
    if (mine !== generation) return;
    body.replaceChildren(facts(item), ...errorBlock(item), h("h3", {}, "Content"), ...blocks(item.content));
    if (item.structured_content !== null && item.structured_content !== undefined) {
      body.append(h("h3", {}, "Structured content"), h("pre", { class: "block" }, pretty(item.structured_content)));
    }
    setCursor(item.next_cursor);
  }

  async function page(mine) {
    if (cursor === null) return;
    more.disabled = true;
    try {
      const item = await json(`${itemPath}?cursor=${encodeURIComponent(cursor)}`);
      if (mine !== generation) return;
      body.append(...blocks(item.content));
      setCursor(item.next_cursor);
    } catch (error) {
      if (mine === generation) report(error);
    } finally {
      more.disabled = false;
    }
  }

  function setCursor(next) {
    cursor = next ?? null;
    more.hidden = cursor === null;
  }

  return { element: panel, open, close: hide, stop: () => document.removeEventListener("keydown", onKey) };
}

function facts(item) {
  const rows = [
    ["Status", badge(item.status)],
    ["Index", String(item.index)],
    ["Server", item.server],
    ["Tool", item.tool],
    ["Worker", item.worker ?? "–"],
    ["Attempts", item.attempts ?? "–"],
    ["Started", when(item.started_at)],
    ["Finished", when(item.finished_at)],
    ["Call", seconds(item.elapsed_seconds)],
    ["Rate wait", seconds(item.rate_wait_seconds)],
    ["Queued", seconds(item.queued_seconds)],
  ];
  if (item.recovered) rows.push(["Recovered", "taken over from a stopped worker"]);
  if (item.stored_truncated) rows.push(["Stored", `cut to fit: ${item.stored_truncated_bytes} bytes not kept`]);
  return h("dl", { class: "facts" }, rows.map(([label, value]) => [h("dt", {}, label), h("dd", {}, value)]));
}

function errorBlock(item) {
  if (!item.error) return [];
  const { code, message, type, details } = item.error;
  return [
    h("h3", {}, "Error"),
    h(
      "div",
      { class: "error-box", id: "panel-error" },
      h("p", {}, h("code", {}, code), ` (${type})`),
      h("p", { class: "message" }, message),
      details ? h("pre", { class: "block" }, pretty(details)) : null,
    ),
  ];
}

function blocks(content) {
  if (!content || !content.length) return [h("p", { class: "hint" }, "No content.")];
  return content.map((block) =>
    block.type === "text" ? h("pre", { class: "block text" }, block.text) : h("pre", { class: "block" }, pretty(block)),
  );
}

function pretty(value) {
  return JSON.stringify(value, null, 2);
}
