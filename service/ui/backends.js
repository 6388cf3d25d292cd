// The backends and the workers, refreshed every few seconds, from what the service already tells:
//   GET /v1/servers          each backend's limits, calls in flight, rate tokens available, tools
//   GET /readyz, /metrics    live workers, queue depth, unfinished items, leases
//   GET …/results?after=     the last items of the tenant's newest batches: recent rate waits, workers seen
import { Failed, Refused, json, jsonLines, request } from "./api.js";
import { every, h, number, seconds, when } from "./dom.js";

const REFRESH_MS = 3000;
const RECENT_BATCHES = 3;
const RECENT_ITEMS = 100; // per batch

export function backendsView(main, report) {
  let stopped = false;
  const servers = h("tbody");
  const service = h("dl", { class: "counts", id: "service-state" });
  const waits = h("tbody");
  const workers = h("tbody");
  const table = (id, heads, body) =>
    h(
      "div",
      { class: "scroll" },
      h("table", { id, class: "grid" }, h("thead", {}, h("tr", {}, heads.map(([t, c]) => h("th", { class: c }, t)))), body),
    );

  main.append(
    h("section", { class: "card" }, h("h1", {}, "Service"), service),
    h(
      "section",
      { class: "card" },
      h("h2", {}, "Backends"),
      table(
        "servers",
        [
          ["Backend", ""],
          ["Transport", "opt"],
          ["Timeout", "num opt"],
          ["In flight", "num"],
          ["Rate limit", ""],
          ["Tokens now", "num"],
          ["Tools", "num"],
        ],
        servers,
      ),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", {}, "Recent rate waits"),
      h("p", { class: "hint" }, `Over the last ${RECENT_ITEMS} finished items of each of your ${RECENT_BATCHES} newest batches.`),
      table(
        "waits",
        [
          ["Backend", ""],
          ["Items", "num"],
          ["Waited", "num"],
          ["Mean wait", "num"],
          ["Longest", "num"],
        ],
        waits,
      ),
      h("h2", {}, "Workers seen in those items"),
      table(
        "workers",
        [
          ["Worker", ""],
          ["Items", "num"],
          ["Last finished", ""],
        ],
        workers,
      ),
    ),
  );

  async function load() {
    try {
      const [list, ready, metrics, recent] = await Promise.all([
        json("v1/servers"),
        readiness(),
        scrape(),
        recentItems(),
      ]);
      if (stopped) return;
      showService(ready, metrics);
      showServers(list, metrics);
      showRecent(recent);
    } catch (error) {
      if (!stopped) report(error);
    }
  }

  function showService(ready, metrics) {
    const cell = (name, label, value) => h("div", {}, h("dt", {}, label), h("dd", { dataset: { count: name } }, value));
    service.replaceChildren(
      cell("ready", "ready", ready.status === "ready" ? "yes" : `no: ${ready.reason ?? ready.status}`),
      cell("workers", "live workers", number(ready.workers)),
      cell("queue", "shard jobs queued", number(metrics.mcp_batch_queue_depth?.[""])),
      cell("unfinished", "unfinished items", number(metrics.mcp_batch_unfinished_items?.[""])),
      cell("leases", "job leases", number(metrics.mcp_batch_job_leases?.[""])),
    );
  }

  function showServers(list, metrics) {
    const leases = metrics.mcp_batch_backend_leases ?? {};
    servers.replaceChildren(
      ...list.map((s) => {
        const inFlight = s.in_flight ?? leases[`server=${s.name}`];
        return h(
          "tr",
          { dataset: { server: s.name } },
          h("td", {}, s.name),
          h("td", { class: "opt" }, s.transport),
          h("td", { class: "num opt" }, seconds(s.timeout_seconds)),
          h("td", { class: "num", dataset: { field: "in-flight" } }, `${number(inFlight)} / ${s.max_concurrency ?? "∞"}`),
          h("td", { dataset: { field: "rate" } }, rate(s.rate_limit)),
          h("td", { class: "num", dataset: { field: "tokens" } }, s.rate_tokens_available === null ? "–" : s.rate_tokens_available.toFixed(1)),
          h("td", { class: "num", title: s.tools_error ?? "" }, s.tools ? s.tools.length : "unreachable"),
        );
      }),
    );
  }

  function showRecent(items) {
    const byServer = new Map();
    const byWorker = new Map();
    for (const item of items) {
      const w = item.rate_wait_seconds ?? 0;
      const s = byServer.get(item.server) ?? { n: 0, waited: 0, sum: 0, max: 0 };
      s.n += 1;
      s.waited += w >= 0.001 ? 1 : 0;
      s.sum += w;
      s.max = Math.max(s.max, w);
      byServer.set(item.server, s);
      if (item.worker) {
        const k = byWorker.get(item.worker) ?? { n: 0, last: "" };
        k.n += 1;
        if ((item.finished_at ?? "") > k.last) k.last = item.finished_at;
        byWorker.set(item.worker, k);
      }
    }
    const none = (cols) => h("tr", {}, h("td", { colSpan: cols, class: "empty" }, "No finished items yet."));
    waits.replaceChildren(
      ...[...byServer].map(([name, s]) =>
        h(
          "tr",
          { dataset: { server: name } },
          h("td", {}, name),
          h("td", { class: "num" }, number(s.n)),
          h("td", { class: "num" }, number(s.waited)),
          h("td", { class: "num" }, seconds(s.sum / s.n)),
          h("td", { class: "num" }, seconds(s.max)),
        ),
      ),
    );
    if (!byServer.size) waits.append(none(5));
    workers.replaceChildren(
      ...[...byWorker].map(([name, k]) =>
        h("tr", {}, h("td", {}, h("code", {}, name)), h("td", { class: "num" }, number(k.n)), h("td", {}, when(k.last))),
      ),
    );
    if (!byWorker.size) workers.append(none(3));
  }

  const poll = every(REFRESH_MS, load);
  return {
    stop() {
      stopped = true;
      poll.stop();
    },
  };
}

function rate(limit) {
  if (!limit) return "none";
  const parts = [];
  if (limit.per_second) parts.push(`${limit.per_second}/s`);
  if (limit.per_minute) parts.push(`${limit.per_minute}/min`);
  if (limit.burst) parts.push(`burst ${limit.burst}`);
  return parts.join(", ");
}

// /readyz answers 503 with the same fields when no worker is live.
async function readiness() {
  try {
    return await json("readyz");
  } catch (error) {
    if (error instanceof Failed && error.status === 503 && error.body) return error.body;
    throw error;
  }
}

// The API's own gauges from /metrics (Prometheus text): name -> "label=value,…" -> value.
async function scrape() {
  let text;
  try {
    text = await (await request("metrics")).text();
  } catch (error) {
    if (error instanceof Refused) throw error;
    return {}; // the rest of the view stands without these figures
  }
  const found = {};
  for (const line of text.split("\n")) {
    const match = /^(mcp_batch_[a-z_]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!match) continue;
    const labels = [...(match[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => `${m[1]}=${m[2]}`).join(",");
    (found[match[1]] ??= {})[labels] = Number(match[3]);
  }
  return found;
}

async function recentItems() {
  const { batches } = await json(`v1/batches?limit=${RECENT_BATCHES}`);
  const pages = await Promise.all(
    batches
      .filter((b) => b.finished > 0)
      .map((b) => {
        const after = Math.max(0, b.finished - RECENT_ITEMS);
        const path = `v1/batches/${encodeURIComponent(b.id)}/results?after=${after}`;
        return jsonLines(path, RECENT_ITEMS).catch((error) => {
          if (error instanceof Refused) throw error;
          return { items: [] }; // expired since it was listed
        });
      }),
  );
  return pages.flatMap((page) => page.items);
}
