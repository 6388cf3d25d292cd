// The tenant's credentials for backends, in two requests (and one per change):
//   GET /v1/servers             which backends take the tenant's own credential (`auth`)
//   GET /v1/credentials         what the tenant holds: kind, when set, OAuth expiry and scopes (never a value)
//   PUT / DELETE /v1/credentials/{server}   set a secret, forget one (the key needs the `credentials` right)
//   POST /v1/credentials/{server}/connect   an OAuth backend: the browser goes on to its authorization server
// The secret typed here goes to the PUT and nowhere else: the field is cleared once it is sent.
import { Failed, json, request } from "./api.js";
import { confirmAction, h, option, setNotice, when } from "./dom.js";

export function credentialsView(main, report) {
  let stopped = false;
  const rows = h("tbody");
  const server = h("select", { id: "credential-server", required: true });
  const secret = h("input", { id: "credential-secret", type: "password", autocomplete: "off", required: true });
  const form = h(
    "form",
    { id: "credential-form", class: "row", onsubmit: (event) => save(event) },
    h("label", { htmlFor: "credential-server" }, "Backend"),
    server,
    h("label", { htmlFor: "credential-secret" }, "Secret"),
    secret,
    h("button", { type: "submit", class: "primary", id: "credential-save" }, "Set"),
  );
  const connects = h("ul", { id: "credential-connects" });
  const connecting = h("div", { hidden: true }, h("h2", {}, "Connect"), connects);
  main.append(
    h(
      "section",
      { class: "card" },
      h("h1", {}, "Credentials"),
      h("p", { class: "hint" }, "Your own credentials for backends that call as you. Values are sealed and never shown."),
      h(
        "div",
        { class: "scroll" },
        h(
          "table",
          { id: "credentials", class: "grid" },
          h("thead", {}, h("tr", {}, ["Backend", "Kind", "Set", "Expires", "Scopes", ""].map((t) => h("th", {}, t)))),
          rows,
        ),
      ),
      connecting,
      h("h2", {}, "Set a secret"),
      form,
    ),
  );

  async function load() {
    try {
      const [servers, held] = await Promise.all([json("v1/servers"), json("v1/credentials")]);
      if (stopped) return;
      const takes = servers.filter((s) => s.auth === "tenant").map((s) => s.name);
      const grants = servers.filter((s) => s.auth === "oauth").map((s) => s.name);
      connects.replaceChildren(...grants.map(connectItem));
      connecting.hidden = grants.length === 0;
      server.replaceChildren(...takes.map((name) => option(name)));
      form.hidden = takes.length === 0;
      rows.replaceChildren(...held.map(row));
    } catch (error) {
      if (!stopped) report(error);
    }
  }

  function row(c) {
    const state = c.needs_connect ? "connect again" : when(c.expires_at);
    return h(
      "tr",
      { dataset: { server: c.server } },
      h("td", {}, c.server),
      h("td", {}, c.kind),
      h("td", {}, when(c.set_at)),
      h("td", {}, c.kind === "oauth" ? state : "–"),
      h("td", {}, (c.scopes ?? []).join(" ") || "–"),
      h("td", {}, h("button", { type: "button", class: "link", onclick: () => remove(c.server) }, "Delete")),
    );
  }

  // A link whose click asks the service for a connect flow, then follows its authorization URL.
  function connectItem(name) {
    return h(
      "li",
      { dataset: { server: name } },
      h("a", { href: `#/credentials`, class: "connect", onclick: (event) => connect(event, name) }, `Connect ${name}`),
    );
  }

  async function connect(event, name) {
    event.preventDefault();
    try {
      const started = await json(`v1/credentials/${encodeURIComponent(name)}/connect`, { method: "POST" });
      window.location.assign(started.authorization_url);
    } catch (error) {
      if (error instanceof Failed) setNotice(error.message);
      else report(error);
    }
  }

  async function save(event) {
    event.preventDefault();
    const value = secret.value;
    secret.value = "";
    try {
      await request(`v1/credentials/${encodeURIComponent(server.value)}`, { method: "PUT", body: { secret: value } });
      setNotice(`Set the credential for ${server.value}.`);
      await load();
    } catch (error) {
      if (error instanceof Failed) setNotice(error.message);
      else report(error);
    }
  }

  async function remove(name) {
    if (!(await confirmAction(`Delete your credential for ${name}? Your calls to it will end unauthenticated.`, "Delete"))) return;
    try {
      await request(`v1/credentials/${encodeURIComponent(name)}`, { method: "DELETE" });
      await load();
    } catch (error) {
      if (error instanceof Failed) setNotice(error.message);
      else report(error);
    }
  }

  load();
  return {
    stop() {
      stopped = true;
    },
  };
}
