// The dashboard: a router over the views named in the URL's fragment, and the prompt for an API key (or, when the
// service offers it, a sign-in at its identity provider: signin.js).
//   #/batches[?status=running&limit=20]   the tenant's batches
//   #/batch/<id>                           one batch
//   #/backends                             the backends and workers
//   #/credentials                          the tenant's credentials for backends
import { Forbidden, NotFound, Refused, apiKey, setApiKey } from "./api.js";
import { backendsView } from "./backends.js";
import { batchView } from "./batch.js";
import { credentialsView } from "./credentials.js";
import { h, setNotice } from "./dom.js";
import { batchesView } from "./list.js";
import { finishSignIn, signInOffer, startSignIn } from "./signin.js";

const main = document.getElementById("main");
const signOut = document.getElementById("sign-out");
let view = null; // the view on screen: { stop() }

// What the views do with a failed request: a refused key brings back the prompt; anything else is a notice.
function report(error) {
  if (error instanceof Refused) {
    if (document.getElementById("key-form")) return; // several requests were refused at once
    const hadKey = Boolean(apiKey());
    setApiKey(null);
    showPrompt(hadKey ? "The API key was refused." : "This service needs an API key.");
  } else if (error instanceof NotFound) {
    setNotice("Not found.");
  } else if (error instanceof Forbidden) {
    setNotice(`Not allowed for this API key: ${error.message}`);
  } else if (error?.name !== "AbortError") {
    setNotice(`Could not reach the service: ${error?.message ?? error}`);
  }
}

function route() {
  view?.stop();
  view = null;
  setNotice(null);
  main.replaceChildren();
  signOut.hidden = !apiKey();
  const [path, query] = (location.hash.slice(1) || "/batches").split("?");
  const [name, id] = path.split("/").filter(Boolean);
  const params = new URLSearchParams(query);
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("here", link.id === `nav-${name === "batch" ? "batches" : name}`);
  }
  if (name === "batch" && id) view = batchView(main, decodeURIComponent(id), report);
  else if (name === "backends") view = backendsView(main, report);
  else if (name === "credentials") view = credentialsView(main, report);
  else view = batchesView(main, params, report);
}

function showPrompt(message) {
  view?.stop();
  view = null;
  signOut.hidden = true;
  const input = h("input", {
    id: "api-key",
    type: "password",
    autocomplete: "off",
    required: true,
    placeholder: "mcpb_…",
  });
  const submit = (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    setApiKey(key);
    route();
  };
  const form = h(
    "form",
    { id: "key-form", class: "card prompt", onsubmit: submit },
    h("h1", {}, "API key"),
    h("p", { id: "key-message", class: message.includes("refused") ? "error" : "" }, message),
    h("label", { htmlFor: "api-key" }, "Key"),
    input,
    h("p", { class: "hint" }, "Kept for this browser tab only (session storage) and sent as a bearer token."),
    h("button", { type: "submit", class: "primary", id: "key-submit" }, "Open the dashboard"),
  );
  main.replaceChildren(form);
  input.focus();
  signInOffer().then(
    (offer) => {
      if (!offer || !form.isConnected) return;
      const host = new URL(offer.issuer).host;
      const button = h("button", { type: "button", class: "primary", id: "sign-in" }, `Sign in with ${host}`);
      button.addEventListener("click", () => startSignIn(offer).catch((error) => setNotice(error.message)));
      form.insertBefore(h("p", { class: "hint" }, "or use an API key:"), form.children[2]);
      form.insertBefore(button, form.children[2]);
    },
    () => {}, // no offer: the key prompt alone
  );
}

signOut.addEventListener("click", () => {
  setApiKey(null);
  route();
});
window.addEventListener("hashchange", route);
finishSignIn().then(route, (error) => showPrompt(`The sign-in failed: ${error.message}.`));
