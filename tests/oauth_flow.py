"""Helpers for tests of OAuth backends: the tests' authorization server and the protected MCP backend as real
processes, and a tenant's browser going through the authorization step (log in, consent, back to the callback)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import redis.asyncio as aioredis
from pydantic import SecretStr

from mcp_batch.credentials.sealing import Sealer, new_key
from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.store.credentials import Credentials
from mcp_batch.tenants import hash_key
from tests.oauth_server import ACCOUNTS
from tests.support import eventually_blocking

PUBLIC_URL = "https://batch.example.test"  # the service's public URL: a browser reaches it through a proxy
ALPHA, BETA, READER = "mcpb_alpha-oauth-key", "mcpb_beta-oauth-key", "mcpb_reader-oauth-key"
SECRETS_KEY = new_key()


@dataclass
class OAuthBackend:
    """The authorization server and the MCP backend it protects, each a process of its own."""

    as_port: int
    rs_port: int
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.as_port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rs_port}/mcp"

    def stats(self) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.get(f"{self.issuer}/stats", timeout=10).json()
        return answer

    def revoke_account(self, user: str) -> None:
        """Revoke every grant of `user`, as the user removing the app at the provider would."""
        httpx.post(f"{self.issuer}/admin/revoke", params={"subject": user}, timeout=10).raise_for_status()

    def drop_access(self, user: str) -> None:
        """Invalidate `user`'s access tokens only: the backend refuses them, a refresh still works."""
        httpx.post(f"{self.issuer}/admin/drop-access", params={"subject": user}, timeout=10).raise_for_status()

    def active(self, token: str) -> bool:
        return bool(httpx.post(f"{self.issuer}/introspect", data={"token": token}, timeout=10).json()["active"])


def _bound() -> socket.socket:
    """A listening loopback socket on a port the kernel picks: the server's from the start, so no other process on
    the machine can take the port between a probe and the server's bind."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@contextmanager
def oauth_backend(as_args: Sequence[str] = ()) -> Iterator[OAuthBackend]:
    """Start the authorization server (with `as_args`: --access-ttl, --client, --cimd) and the backend it protects;
    each answers once its process has started serving on the socket handed to it."""
    as_sock, rs_sock = _bound(), _bound()
    backend = OAuthBackend(as_sock.getsockname()[1], rs_sock.getsockname()[1])
    try:
        for module, sock, extra in (
            ("tests.oauth_server", as_sock, list(as_args)),
            ("tests.protected_backend", rs_sock, ["--issuer", backend.issuer]),
        ):
            argv = [sys.executable, "-m", module, "--port", str(sock.getsockname()[1]), "--fd", str(sock.fileno())]
            quiet = subprocess.DEVNULL
            backend.processes.append(
                subprocess.Popen([*argv, *extra], stdout=quiet, stderr=quiet, pass_fds=[sock.fileno()])
            )
        for url in (f"{backend.issuer}/stats", backend.url):
            eventually_blocking(partial(_answers, backend, url), what=f"{url} answering", timeout=30)
        yield backend
    finally:
        for process in backend.processes:
            process.kill()
            process.wait(10)
        as_sock.close()
        rs_sock.close()


def _answers(backend: OAuthBackend, url: str) -> bool:
    if any(process.poll() is not None for process in backend.processes):
        raise RuntimeError("an OAuth test server exited")
    try:
        httpx.get(url, timeout=2)
    except httpx.TransportError:
        return False
    return True


def _form_fields(page: str) -> dict[str, str]:
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page))


async def authorize(authorization_url: str, user: str, *, approve: bool = True) -> str:
    """Go through the authorization server's pages as `user`'s browser: the URL it sends the browser back to (the
    service's callback, under its public URL)."""
    async with httpx.AsyncClient(timeout=30) as browser:
        asked = await browser.get(authorization_url)
        assert asked.status_code == 302, asked.text
        login_page = await browser.get(urljoin(authorization_url, asked.headers["location"]))
        fields = _form_fields(login_page.text)
        login_url = urljoin(authorization_url, "/login")
        consent_page = await browser.post(login_url, data={**fields, "username": user, "password": ACCOUNTS[user]})
        assert "Allow" in consent_page.text, consent_page.text
        decision = "allow" if approve else "deny"
        back = await browser.post(
            urljoin(authorization_url, "/consent"), data={**_form_fields(consent_page.text), "decision": decision}
        )
        assert back.status_code == 302, back.text
        location: str = back.headers["location"]
        return location


async def follow_to_service(base_url: str, callback_url: str) -> httpx.Response:
    """The browser arriving at the service's callback (the public URL's proxy forwards it to `base_url`)."""
    assert callback_url.startswith(PUBLIC_URL + "/"), callback_url
    async with httpx.AsyncClient(timeout=60) as browser:
        return await browser.get(base_url + callback_url.removeprefix(PUBLIC_URL))


async def connect(api: httpx.AsyncClient, base_url: str, server: str, user: str) -> httpx.Response:
    """The whole connect of the API client's tenant to `server` as `user`: the callback's page."""
    started = await api.post(f"/v1/credentials/{server}/connect")
    assert started.status_code == 200, started.text
    return await follow_to_service(base_url, await authorize(started.json()["authorization_url"], user))


def oauth_settings(settings: Settings, tmp_path: Path, servers: dict[str, Any]) -> Settings:
    """The test's settings with keys on (tenants alpha and beta may set credentials; a reader of alpha's may not),
    `servers`, a secrets key, and the public URL."""
    keys = [
        {"sha256": hash_key(ALPHA), "tenant": "alpha", "write": True, "credentials": True},
        {"sha256": hash_key(BETA), "tenant": "beta", "write": True, "credentials": True},
        {"sha256": hash_key(READER), "tenant": "alpha", "name": "reader"},
    ]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    (tmp_path / "servers.json").write_text(json.dumps({"mcpServers": servers}))
    return settings.model_copy(
        update={
            "auth": "keys",
            "keys": tmp_path / "keys.json",
            "servers": tmp_path / "servers.json",
            "secrets_keys": SecretStr(json.dumps([SECRETS_KEY])),
            "public_url": PUBLIC_URL,
        }
    )


def as_(base_url: str, key: str) -> httpx.AsyncClient:
    """A client of the API with `key`."""
    return httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def stored(redis: aioredis.Redis) -> Credentials:
    """Tenants' credentials as the service stores them, opened with the tests' secrets key."""
    return Credentials(redis, Keys(), Sealer.from_setting(SecretStr(json.dumps([SECRETS_KEY]))))
