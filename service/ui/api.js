// The REST API as the page uses it. Every request carries the API key kept for this browser session (sessionStorage
// only: it goes when the tab closes); with auth off there is no key and none is needed.

const KEY = "mcp-batch-key";

// The API's root: the page is served at <root>/ui/, so the API is one level up (this also holds behind a path prefix).
const root = new URL("../", document.baseURI);

export class Refused extends Error {} // 401: no key, or one the service does not hold
export class NotFound extends Error {} // 404: no such batch or item (or another tenant's: the API cannot tell them apart)

// The words of an error body: its `detail`, or each problem's `msg` when it is a list.
function detailText(body) {
  if (typeof body?.detail === "string") return body.detail;
  if (Array.isArray(body?.detail)) return body.detail.map((problem) => problem?.msg).filter(Boolean).join("; ");
  return "";
}

// Any other answer that is not a success, with its status and its JSON body (when it has one).
export class Failed extends Error {
  constructor(status, body) {
    super(detailText(body) || `the service answered ${status}`);
    this.status = status;
    this.body = body;
  }
}

export class Forbidden extends Failed {} // 403: the key may not do this (a read-only key cancelling or deleting)

export function apiKey() {
  return sessionStorage.getItem(KEY);
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

function headers(extra) {
  const key = apiKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : { ...extra };
}

export async function request(path, { method = "GET", signal, extraHeaders = {}, body } = {}) {
  const sent = body === undefined ? {} : { body: JSON.stringify(body) }; // a JSON body (an answer to a question)
  const extra = body === undefined ? extraHeaders : { ...extraHeaders, "Content-Type": "application/json" };
  const response = await fetch(new URL(path, root), {
    method,
    signal,
    headers: headers(extra),
    cache: "no-store",
    ...sent,
  });
  if (response.status === 401) throw new Refused("the API key was refused");
  if (response.status === 404) throw new NotFound("not found");
  if (response.status === 403) throw new Forbidden(403, await response.json().catch(() => null));
  if (!response.ok) throw new Failed(response.status, await response.json().catch(() => null));
  return response;
}

export async function json(path, options) {
  return (await request(path, options)).json();
}

// The lines of a streamed body as they arrive. Leaving the loop early cancels the response.
async function* lines(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let done = false;
  try {
    while (!done) {
      const chunk = await reader.read();
      done = chunk.done;
      buffer += done ? decoder.decode() : decoder.decode(chunk.value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n")) >= 0) {
        yield buffer.slice(0, cut).replace(/\r$/, "");
        buffer = buffer.slice(cut + 1);
      }
    }
    if (buffer) yield buffer;
  } finally {
    if (!done) reader.cancel().catch(() => {});
  }
}

// At most `most` objects of a JSON Lines route, and whether there were more; the rest is never read.
export async function jsonLines(path, most, signal) {
  const response = await request(path, { signal });
  const found = [];
  for await (const line of lines(response.body)) {
    if (line) found.push(JSON.parse(line));
    if (found.length > most) break;
  }
  return { items: found.slice(0, most), more: found.length > most };
}

// A batch's Server-Sent Events, read with fetch so that the key goes in the Authorization header (an EventSource
// cannot send one). `onEvent(name, data)` gets each event; the stream is resumed after the last item's seq
// (Last-Event-ID) when it drops or reaches its time limit, and ends after `end`, a refusal, or when `signal` aborts.
export async function follow(path, onEvent, signal) {
  let last = null;
  let pause = 500;
  while (!signal.aborted) {
    try {
      const extraHeaders = last === null ? {} : { "Last-Event-ID": String(last) };
      const response = await request(path, { signal, extraHeaders });
      let event = { name: "message", data: [], id: null };
      for await (const line of lines(response.body)) {
        if (line === "") {
          if (event.id !== null) last = event.id;
          if (event.data.length) {
            onEvent(event.name, JSON.parse(event.data.join("\n")));
            pause = 500;
          }
          if (event.name === "end") return;
          event = { name: "message", data: [], id: null };
          continue;
        }
        if (line.startsWith(":")) continue; // a keep-alive comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event.name = value;
        else if (field === "data") event.data.push(value);
        else if (field === "id") event.id = value;
      }
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof Refused || error instanceof NotFound) throw error;
    }
    // The stream ended without `end` (a time limit, a dropped connection, a restart): resume after a pause.
    await new Promise((resolve) => setTimeout(resolve, pause));
    pause = Math.min(pause * 2, 5000);
  }
}

// Save a response as a file: fetched with the key, then handed to the browser as a blob.
export async function download(path, filename) {
  const blob = await (await request(path)).blob();
  const url = URL.createObjectURL(blob);
  const link = Object.assign(document.createElement("a"), { href: url, download: filename });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
