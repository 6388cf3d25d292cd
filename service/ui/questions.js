// The questions a batch's backends wait on (items `input_required`): a form for each, made from the question itself
// (an elicitation's requested schema: strings, numbers, integers, booleans, enums and arrays of enum strings; a
// sampling request's messages and a reply to write), and accept, decline and cancel. Everything a backend sent is
// shown as text, never as HTML.
import { Failed, json } from "./api.js";
import { h, option, when } from "./dom.js";

export function questionsPanel(id, report) {
  const path = `v1/batches/${encodeURIComponent(id)}`;
  const list = h("div", { id: "questions-list" });
  const element = h("section", { class: "card", id: "questions", hidden: true }, h("h2", {}, "Waiting for an answer"), list);
  let shown = null; // the ids of the questions shown, so a refresh does not wipe a form being filled

  async function refresh() {
    let found;
    try {
      found = (await json(`${path}/questions`)).questions;
    } catch (error) {
      return report(error);
    }
    const ids = found.map((q) => q.input_request.id).join(",");
    if (ids === shown) return;
    shown = ids;
    element.hidden = found.length === 0;
    list.replaceChildren(...found.map(questionForm));
  }

  // Each question is built on its own: one the page cannot show as a form (a backend's odd schema or message) is
  // shown with decline and cancel only, and the others still get their forms.
  function questionForm(pending) {
    const question = pending.input_request;
    const fault = h("p", { class: "fault", hidden: true });
    let fill;
    try {
      fill = question.kind === "sampling" ? samplingFields(question.params) : elicitationFields(question.params);
    } catch {
      fill = { element: h("p", { class: "fault unshowable" }, "This question cannot be shown as a form: decline or cancel it."), content: null };
    }
    const send = async (action) => {
      const body = { action, request_id: question.id };
      if (action === "accept") body.content = fill.content();
      try {
        await json(`${path}/items/${encodeURIComponent(pending.item_id)}/input`, { method: "POST", body });
      } catch (error) {
        if (!(error instanceof Failed)) return report(error);
        fault.hidden = false;
        fault.textContent = faults(error);
        return;
      }
      shown = null;
      refresh();
    };
    return h(
      "div",
      { class: "question", dataset: { item: pending.item_id, kind: question.kind } },
      h("h3", {}, "Item ", h("code", {}, pending.item_id), ` asks (${question.kind}), until ${when(question.expires_at, true)}`),
      h("p", { class: "question-message" }, String(question.params?.message ?? question.params?.systemPrompt ?? "")),
      fill.element,
      fault,
      h(
        "div",
        { class: "actions" },
        h("button", { type: "button", class: "primary", hidden: !fill.content, dataset: { answer: "accept" }, onclick: () => send("accept") }, "Accept"),
        h("button", { type: "button", dataset: { answer: "decline" }, onclick: () => send("decline") }, "Decline"),
        h("button", { type: "button", dataset: { answer: "cancel" }, onclick: () => send("cancel") }, "Cancel"),
      ),
    );
  }

  return { element, refresh };
}

function faults(error) {
  const detail = error.body?.detail;
  if (!Array.isArray(detail)) return error.message;
  return detail.map((d) => `${d.loc.slice(1).join(".")}: ${d.msg}`).join("; ");
}

function choices(field) {
  if (Array.isArray(field.enum)) return field.enum.map((value, i) => [value, field.enumNames?.[i] ?? value]);
  const options = field.oneOf ?? field.anyOf;
  return Array.isArray(options) ? options.map((o) => [o.const, o.title ?? o.const]) : null;
}

function elicitationFields(params) {
  const schema = params.requestedSchema ?? {};
  const required = new Set(schema.required ?? []);
  const readers = [];
  const rows = Object.entries(schema.properties ?? {}).map(([name, field]) => {
    const label = `${field.title ?? name}${required.has(name) ? " *" : ""}`;
    const [input, read] = fieldInput(name, field);
    readers.push([name, read]);
    return h("label", { class: "field" }, h("span", {}, label), input, field.description ? h("small", {}, field.description) : null);
  });
  const content = () => {
    const filled = {};
    for (const [name, read] of readers) {
      const value = read();
      if (value !== undefined) filled[name] = value;
    }
    return filled;
  };
  return { element: h("div", { class: "fields" }, rows), content };
}

function fieldInput(name, field) {
  const items = field.type === "array" ? choices(field.items ?? {}) : null;
  if (items) {
    const select = h("select", { name, multiple: true }, items.map(([v, l]) => option(v, l, (field.default ?? []).includes(v))));
    return [select, () => [...select.selectedOptions].map((o) => o.value)];
  }
  const listed = choices(field);
  if (listed) {
    const select = h("select", { name }, option("", "—"), listed.map(([v, l]) => option(v, l, v === field.default)));
    return [select, () => select.value || undefined];
  }
  if (field.type === "boolean") {
    const box = h("input", { name, type: "checkbox", checked: field.default === true });
    return [box, () => box.checked];
  }
  if (field.type === "number" || field.type === "integer") {
    const box = h("input", { name, type: "number", step: field.type === "integer" ? "1" : "any", min: field.minimum, max: field.maximum });
    return [box, () => (box.value === "" ? undefined : Number(box.value))];
  }
  const box = h("input", { name, type: "text", placeholder: field.default ?? "" });
  return [box, () => (box.value === "" ? undefined : box.value)];
}

function samplingFields(params) {
  const asked = (params.messages ?? []).map((m) =>
    h("blockquote", {}, `${m.role}: `, m.content?.type === "text" ? m.content.text : `(${m.content?.type ?? "content"})`),
  );
  const reply = h("textarea", { name: "reply", rows: 3 });
  const model = h("input", { name: "model", type: "text", value: "human" });
  const content = () => ({ role: "assistant", content: { type: "text", text: reply.value }, model: model.value });
  const element = h(
    "div",
    { class: "fields" },
    asked,
    h("label", { class: "field" }, h("span", {}, "Reply"), reply),
    h("label", { class: "field" }, h("span", {}, "Model"), model),
  );
  return { element, content };
}
