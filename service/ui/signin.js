// Signing in at the identity provider, when the service offers it (ui/sign-in.json): the authorization code flow with
// PKCE in this tab. The verifier and state wait in sessionStorage while the browser is at the provider; the access
// token is kept as a key is (api.js: this tab's session only).
import { setApiKey } from "./api.js";

const PENDING = "mcp-batch-sign-in";
const root = new URL("../", document.baseURI);
const redirectUri = () => new URL("ui/", root).href;

function base64url(bytes) {
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

// The provider to sign in at, or null when the service offers none.
export async function signInOffer() {
  const response = await fetch(new URL("ui/sign-in.json", root), { cache: "no-store" });
  return response.ok ? response.json() : null;
}

export async function startSignIn(offer) {
  const verifier = base64url(crypto.getRandomValues(new Uint8Array(32)));
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  const state = base64url(crypto.getRandomValues(new Uint8Array(16)));
  sessionStorage.setItem(PENDING, JSON.stringify({ verifier, state }));
  const url = new URL(offer.authorization_endpoint);
  url.search = new URLSearchParams({
    response_type: "code",
    client_id: offer.client_id,
    redirect_uri: redirectUri(),
    scope: offer.scope,
    state,
    code_challenge: base64url(new Uint8Array(digest)),
    code_challenge_method: "S256",
    resource: offer.resource,
  }).toString();
  location.assign(url.href);
}

// Back from the provider (?code=…&state=…): the code exchanged for a token, the query taken off the address.
// False when this load is not a return from the provider.
export async function finishSignIn() {
  const params = new URLSearchParams(location.search);
  if (!params.has("code") && !params.has("error")) return false;
  const pending = JSON.parse(sessionStorage.getItem(PENDING) || "null");
  sessionStorage.removeItem(PENDING);
  history.replaceState(null, "", redirectUri() + location.hash);
  if (params.has("error")) throw new Error(`the identity provider said ${params.get("error")}`);
  if (!pending || params.get("state") !== pending.state) throw new Error("the sign-in came back unasked for");
  const offer = await signInOffer();
  if (!offer) throw new Error("the service no longer offers a sign-in");
  if (params.has("iss") && params.get("iss") !== offer.issuer) throw new Error("the sign-in came back from elsewhere");
  const response = await fetch(offer.token_endpoint, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code: params.get("code"),
      redirect_uri: redirectUri(),
      client_id: offer.client_id,
      code_verifier: pending.verifier,
      resource: offer.resource,
    }),
  });
  if (!response.ok) throw new Error(`the identity provider refused the sign-in (${response.status})`);
  setApiKey((await response.json()).access_token);
  return true;
}
