"""A real authorization server for the OAuth tests: `oidc-provider` (npm, pinned in tests/oidc/ with the Node 22 it
runs on) as a child process on a loopback port, its signing key made here so a test can also sign a token the
provider never would (expired, for another audience, without a tenant) with the provider's own key.

Its clients (`CLIENTS`): machines of tenants a and b with the client-credentials grant and various scopes, one whose
tokens are opaque, the service's own for introspection, and `browser`, a public client for the authorization-code
flow with PKCE. Its dev login page signs anyone in: a login "name@tenant" is a user of that tenant.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import html
import json
import re
import secrets
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
from joserfc import jwt
from joserfc.jwk import ECKey
from pydantic import SecretStr

from mcp_batch.issuers import OAuthIssuer
from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from tests.ports import free_port
from tests.support import eventually_blocking

FOLDER = Path(__file__).resolve().parent / "oidc"
NODE = FOLDER / "node_modules" / ".bin" / "node"
SECRET = "a-client-secret-long-enough-for-the-provider"
INTROSPECTOR = ("mcp-batch", SECRET)
BROWSER = "browser"
KEY_A = "mcpb_tenant-a-key"


def _machine(client_id: str, scope: str, tenant: str | None) -> dict[str, Any]:
    client = {
        "client_id": client_id,
        "client_secret": SECRET,
        "grant_types": ["client_credentials"],
        "redirect_uris": [],
        "response_types": [],
    }
    return client | ({"scope": scope} if scope else {}) | ({"tenant": tenant} if tenant else {})


CLIENTS = [
    _machine("machine-a", "read write admin credentials", "a"),
    _machine("machine-b", "read write", "b"),
    _machine("reader-a", "read", "a"),
    _machine("nobody-a", "profile", "a"),
    _machine("tenantless", "read write", None),
    _machine("opaque-a", "read write", "a"),
    _machine(INTROSPECTOR[0], "", None),
]


def installed() -> Path:
    """The provider's Node, installed by `npm ci` when missing (one installer at a time)."""
    with (FOLDER / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (NODE.exists() and (FOLDER / "node_modules" / "oidc-provider").exists()):
            npm = shutil.which("npm")
            assert npm is not None, "npm is needed to install the test authorization server (tests/oidc)"
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=FOLDER, check=True, timeout=600)
    return NODE


def new_key(kid: str | None = None) -> ECKey:
    return ECKey.generate_key("P-256", parameters={"kid": kid or secrets.token_hex(4), "use": "sig", "alg": "ES256"})


class OidcProvider:
    """oidc-provider on a port of its own; `start`, `rotate` (a new signing key, the old one gone), `stop`."""

    def __init__(self, tmp: Path, redirect_uris: list[str] | None = None, ttl: int = 300) -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.key = new_key()
        self._config = tmp / f"oidc-{self.port}.json"
        self._log = tmp / f"oidc-{self.port}.log"
        self._redirect_uris = redirect_uris or ["http://127.0.0.1/callback"]
        self._ttl = ttl
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OidcProvider:
        """Started and answering; on a port another process took meanwhile (other suites share the machine), on
        the next free one."""
        for _ in range(5):
            if self._started():
                return self
            self.port = free_port()
            self.issuer = f"http://127.0.0.1:{self.port}"
        raise RuntimeError("oidc-provider found no free port: " + self._log.read_text()[-1000:])

    def _started(self) -> bool:
        browser = {
            "client_id": BROWSER,
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
            "redirect_uris": self._redirect_uris,
            "scope": "openid read write admin credentials",
        }
        config = {
            "port": self.port,
            "jwks": {"keys": [self.key.as_dict(private=True)]},
            "clients": [*CLIENTS, browser],
            "opaque_clients": ["opaque-a"],
            "ttl": self._ttl,
        }
        self._config.write_text(json.dumps(config))
        argv = [str(installed()), str(FOLDER / "provider.mjs"), str(self._config)]
        with self._log.open("ab") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=log)
        proc = self._proc

        def up() -> bool:
            if proc.poll() is not None:
                return True
            try:
                return httpx.get(f"{self.issuer}/jwks", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        eventually_blocking(up, what="oidc-provider's /jwks", timeout=30)
        if proc.poll() is None:
            return True
        if "EADDRINUSE" not in self._log.read_text()[-2000:]:
            raise RuntimeError("oidc-provider exited: " + self._log.read_text()[-1000:])
        self._proc = None
        return False

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def rotate(self) -> None:
        """A new signing key in place of the old one, as a provider's key rotation leaves it (same port, same
        issuer)."""
        self.stop()
        self.key = new_key()
        assert self._started(), "oidc-provider's port was taken as it restarted: " + self._log.read_text()[-1000:]

    def token(self, client_id: str, resource: str, scope: str = "read write") -> str:
        """An access token by the client-credentials grant."""
        answer = httpx.post(
            f"{self.issuer}/token",
            data={"grant_type": "client_credentials", "scope": scope, "resource": resource},
            auth=(client_id, SECRET),
        )
        assert answer.status_code == 200, answer.text
        token: str = answer.json()["access_token"]
        return token

    def sign(self, claims: dict[str, Any], key: ECKey | None = None) -> str:
        """A JWT as the provider's own would be, with these claims (over the defaults), signed by `key` or the
        provider's key."""
        now = int(time.time())
        body = {"iss": self.issuer, "iat": now, "exp": now + 300, "scope": "read write", "tenant": "a"} | claims
        signer = key or self.key
        return jwt.encode({"alg": "ES256", "typ": "at+jwt", "kid": signer.kid}, body, signer)

    def sign_in(self, http: httpx.Client, authorize_url: str, login: str) -> str:
        """The browser's part of the authorization-code flow from `authorize_url`: the dev login and consent pages
        filled in over HTTP; the redirect URI the provider sends the browser back to at the end (with the code)."""
        page = http.get(authorize_url, follow_redirects=True)
        for _ in range(4):
            action = re.search(r'<form[^>]*action="([^"]+)"', page.text)
            assert action is not None, page.text[:500]
            fields = dict(re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', page.text))
            if 'name="login"' in page.text:
                fields |= {"login": login, "password": "any"}
            answer = http.post(urllib.parse.urljoin(str(page.url), html.unescape(action.group(1))), data=fields)
            while answer.is_redirect:
                location = urllib.parse.urljoin(str(answer.url), answer.headers["location"])
                if not location.startswith(self.issuer):
                    return location
                answer = http.get(location)
            page = answer
        raise AssertionError("the provider did not send the browser back: " + page.text[:500])


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def signed_in_settings(
    settings: Settings, provider: OidcProvider, tmp_path: Path, port: int, **tenants: Any
) -> Settings:
    """Keys and tokens both: a key of tenant a, the provider's tokens, and a tenants section."""
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"sha256": hash_key(KEY_A), "tenant": "a"}], "tenants": tenants}))
    issuer = OAuthIssuer(
        issuer=provider.issuer,
        introspection_client_id=INTROSPECTOR[0],
        introspection_client_secret=SecretStr(INTROSPECTOR[1]),
    )
    return settings.model_copy(
        update={"auth": "keys,oauth", "keys": keys, "public_url": f"http://127.0.0.1:{port}", "oauth_issuers": [issuer]}
    )
