// The backends and the workers, refreshed every few seconds, in three requests:
//   GET /v1/servers          each backend's limits, calls in flight, rate tokens available, tools
//   GET /v1/overview         live workers, queue depth, unfinished items, leases
//   GET /v1/recent-items     the last items of the tenant's newest batches: recent rate waits, workers seen
import { json } from "./api.js";
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
      const [list, state, recent] = await Promise.all([
        json("v1/servers"),
        json("v1/overview"),
        json(`v1/recent-items?batches=${RECENT_BATCHES}&per_batch=${RECENT_ITEMS}`),
      ]);
      if (stopped) return;
      showService(state);
      showServers(list, state);
      showRecent(recent.items);
    } catch (error) {
      if (!stopped) report(error);
    }
  }

  function showService(state) {
    const cell = (name, label, value) => h("div", {}, h("dt", {}, label), h("dd", { dataset: { count: name } }, value));
    service.replaceChildren(
      cell("ready", "ready", state.ready ? "yes" : `no: ${state.reason}`),
      cell("workers", "live workers", number(state.workers)),
      cell("queue", "shard jobs queued", number(state.queue_depth)),
      cell("unfinished", "unfinished items", number(state.unfinished_items)),
      cell("leases", "job leases", number(state.job_leases)),
    );
  }

  function showServers(list, state) {
    const leases = new Map(state.backends.map((b) => [b.name, b.leases_in_use]));
    servers.replaceChildren(
      ...list.map((s) => {
        const inFlight = s.in_flight ?? leases.get(s.name);
        return h(
          "tr",
          { dataset: { server: s.name } },
          h("td", {}, s.name),
          h("td", { class: "opt" }, s.transport),
          h("td", { class: "num opt" }, seconds(s.timeout_seconds)),
          h("td", { class: "num", dataset: { field: "in-flight" } }, `${number(inFlight)} / ${s.max_concurrency ?? "∞"}`),
          h("td", { dataset: { field: "rate" } }, rate(s.rate_limit)),
          h("td", { class: "num", dataset: { field: "tokens" } }, s.rate_tokens_available === null ? "–" : s.rate_tokens_available.toFixed(1)),
          h("td", { class: "num", title: s.tools_error ?? "", dataset: { field: "tools" } }, toolsCell(s)),
        );
      }),
    );
  }

  // A backend that takes the tenant's own credential and has none: a link to the page that gives it one.
  function toolsCell(s) {
    if (s.tools) return s.tools.length;
    if (s.connect) return h("a", { href: "#/credentials", title: s.tools_error ?? "" }, "connect");
    return "unreachable";
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
