// Building the page: elements from plain data (text is always set as text, never parsed as HTML), formatting,
// the confirmation dialog and the notice line.
import { TERMINAL } from "./statuses.js";

export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") element.className = value;
    else if (name === "dataset") Object.assign(element.dataset, value);
    else if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name in element) element[name] = value;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined && child !== false) element.append(child);
  }
  return element;
}

// A batch's status; one that ended with failures says how many, in the failures' colour: never a plain success.
export function badge(status, failed = 0) {
  if (!failed || !TERMINAL.has(status)) {
    return h("span", { class: `status s-${status}` }, status);
  }
  return h("span", { class: `status s-${status} has-failures` }, `${status}, ${number(failed)} failed`);
}

// A bar of what became of a batch's calls: ok, failed and not run (skipped, cancelled, expired) apart, the rest
// still to come; a cancelled batch's bar shows what was done, not a full bar. `counts`: {total, ok, failed, notRun}.
export function outcome(props = {}) {
  const parts = ["ended-ok", "ended-failed", "not-run", "to-come"].map((name) => h("span", { class: `seg seg-${name}` }));
  return h("div", { class: "outcome", role: "progressbar", ...props }, parts);
}

export function showOutcome(bar, { total, ok, failed, notRun }) {
  const left = Math.max(total - ok - failed - notRun, 0);
  const [okPart, failedPart, notRunPart, leftPart] = bar.children;
  okPart.style.flexGrow = String(ok);
  failedPart.style.flexGrow = String(failed);
  notRunPart.style.flexGrow = String(notRun);
  leftPart.style.flexGrow = String(total ? left : 1);
  Object.assign(bar.dataset, { ok, failed, notRun, left, total });
  bar.setAttribute("aria-valuemax", String(total));
  bar.setAttribute("aria-valuenow", String(total - left));
  bar.title = `${number(ok)} ok, ${number(failed)} failed, ${number(notRun)} not run of ${number(total)}`;
  return bar;
}

export function option(value, label = value, selected = false) {
  return h("option", { value, selected }, label);
}

export function number(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
}

export function seconds(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  return `${s.toFixed(s < 10 ? 2 : 1)} s`;
}

// ISO 8601 in UTC, shown in the reader's own time zone.
export function when(iso, timeOnly = false) {
  if (!iso) return "–";
  const date = new Date(iso);
  return timeOnly ? date.toLocaleTimeString() : date.toLocaleString();
}

export function shortId(id) {
  return id.length > 12 ? `${id.slice(0, 8)}…` : id;
}

export function setNotice(text) {
  const notice = document.getElementById("notice");
  notice.textContent = text || "";
  notice.hidden = !text;
}

// Ask before doing something that cannot be undone; resolves true when the reader confirms.
export function confirmAction(text, okLabel) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  const ok = document.getElementById("confirm-ok");
  const no = document.getElementById("confirm-no");
  ok.textContent = okLabel;
  return new Promise((resolve) => {
    const done = (answer) => {
      ok.removeEventListener("click", yes);
      no.removeEventListener("click", back);
      dialog.removeEventListener("cancel", back);
      dialog.close();
      resolve(answer);
    };
    const yes = () => done(true);
    const back = () => done(false);
    ok.addEventListener("click", yes);
    no.addEventListener("click", back);
    dialog.addEventListener("cancel", back);
    dialog.showModal();
  });
}

// Run `task` now and then every `ms` while the view lives; `now()` runs it again at once (never two at a time).
export function every(ms, task) {
  let timer = null;
  let stopped = false;
  let running = false;
  let again = false;
  const run = async () => {
    clearTimeout(timer);
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      if (document.visibilityState !== "hidden") await task();
    } finally {
      running = false;
    }
    if (stopped) return;
    if (again) {
      again = false;
      run();
    } else {
      timer = setTimeout(run, ms);
    }
  };
  run();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
    now: run,
  };
}
