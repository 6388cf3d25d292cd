"""create_app(): the FastAPI application, its lifespan (Redis, arq pool, done-channel listener) and error mapping.

/docs (Swagger UI) and /redoc load their scripts and styles from the API itself (fastapi-offline ships them), so they
work where no CDN can be reached."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from mcp_batch.backends.catalog import Catalog
from mcp_batch.backends.limits import LeaseSemaphore, RateLimiter
from mcp_batch.backends.servers_file import load_servers, require_secrets_key
from mcp_batch.contract.item_cursors import CursorKey
from mcp_batch.credentials.grants import GrantRevoker
from mcp_batch.credentials.sealing import Sealer
from mcp_batch.host_policy import HostPolicy, authority
from mcp_batch.issuers import oauth_complete
from mcp_batch.models import ErrorDetail
from mcp_batch.ops import collector, durability, tracing
from mcp_batch.ops.async_library import declared_asyncio
from mcp_batch.ops.payload_logs import keep_payloads_out_of_logs
from mcp_batch.ops.prometheus import ApiMetrics
from mcp_batch.settings import Settings, get_settings
from mcp_batch.store import Store
from mcp_batch.store.channels import Listener
from mcp_batch.store.connection import close, close_data, control_pool, data_client
from mcp_batch.store.cursor_secret import cursor_secret
from mcp_batch.tenants import KeyRing, Right, load_keys
from service.application.services import Services
from service.auth import SignIn
from service.doors import gumloop
from service.doors.mcp import build_mcp_server, jsonrpc_refusal, mcp_routes
from service.host_guard import HostGuard
from service.http_errors import install_error_handlers
from service.middleware import BodyLimit, RequestMetrics, StorageUnavailable
from service.oauth import resource
from service.oauth.resource import MCP_PATH, ResourceFace, face_scopes
from service.oauth.tokens import TokenCheck
from service.routes import batches, credentials, dashboard, dashboard_sign_in, health, oauth, questions, servers
from service.routes import scrape as metrics_routes
from service.routes import stream as events
from service.routes.dashboard import content_security_policy
from service.routes.dashboard_sign_in import connect_sources

DOCS_ASSETS = "/docs-assets"  # where the Swagger UI and ReDoc files are served
_ISSUER_TIMEOUT = httpx.Timeout(5.0)  # an issuer's metadata, keys or introspection: a request waits on it


def create_app(settings: Settings | None = None, served_host: str | None = None) -> FastAPI:
    """The API for these settings. The servers and keys files are read here, so a bad one stops start-up at once.

    `served_host`: the address the server is told to listen on (`mcp-batch api --host`); when it is a name, requests
    naming it are served as well as those naming the address they arrived at (host_guard.py)."""
    settings = settings or get_settings()
    keep_payloads_out_of_logs()
    tracing.configure("mcp-batch-api")  # only when the OTEL_* variables ask for traces
    registry = load_servers(settings.servers)
    # A bad keys file stops start-up too; with tokens only, it holds just the tenants section (or is not there).
    keyring = None if settings.auth == "none" else load_keys(settings.keys, required="keys" in settings.auth)
    issuers_http = httpx.AsyncClient(timeout=_ISSUER_TIMEOUT, follow_redirects=False)
    tokens, face = sign_in_by_token(settings, keyring, issuers_http)
    # A bad MCP_BATCH_SECRETS_KEYS, or none with backends that take tenants' credentials, stops start-up too.
    require_secrets_key(registry, Sealer.from_setting(settings.secrets_keys) is not None)
    keys = settings.key_names
    mcp = build_mcp_server(lambda: app.state.services, settings)
    metrics = ApiMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redis = await control_pool(settings)
        data = await data_client(settings, redis)
        durability.log_at_start(await durability.read(data, settings), "api")
        done = Listener(redis, keys.done_channel)
        await done.start()
        catalog = Catalog(data, keys, registry, settings.tools_refresh_seconds, settings.connect_timeout_seconds)
        app.state.services = Services(
            settings=settings,
            keys=keys,
            registry=registry,
            redis=redis,
            store=Store.from_settings(data, settings, done, control=redis),
            catalog=catalog,
            rate=RateLimiter(data, keys),
            leases=LeaseSemaphore(data, keys, control=redis),
            cursors=CursorKey(await cursor_secret(redis, keys, settings.cursor_secret)),
            metrics=metrics,
            revoker=GrantRevoker(settings.connect_timeout_seconds),
        )
        try:
            # Routes have no lifespan of their own: the MCP session manager runs (and stops, before Redis closes) here.
            async with mcp.session_manager.run():
                collector.freeze_what_startup_made()
                with declared_asyncio():
                    yield
        finally:
            await done.stop()
            await close_data(data, redis)
            await close(redis)
            await issuers_http.aclose()
            tracing.flush()

    app = FastAPIOffline(
        static_url=DOCS_ASSETS,
        swagger_ui_parameters={"validatorUrl": None},  # no call to an online validator: the page works offline
        title="mcp-batch",
        version="1",
        summary="Durable batches of MCP tool calls, run by arq workers under shared limits.",
        lifespan=lifespan,
        # What answers before any route does, so every route may: the HTTP server itself (a request that is not valid
        # HTTP), the host guard and the body limit.
        responses={
            400: {"content": {"text/plain": {}}, "description": "Not a valid HTTP request (answered by the server)."},
            421: {"model": ErrorDetail, "description": "The Host header names a host this service does not serve."},
            413: {"model": ErrorDetail, "description": f"The body is over {settings.max_body_bytes} bytes."},
        },
    )
    app.state.resource_face = face
    app.state.token_check = tokens
    app.state.dashboard_policy = content_security_policy(connect_sources(settings))
    app.state.max_json_depth = settings.max_json_depth
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    routers = [
        batches.router,
        questions.router,
        events.router,
        servers.router,
        gumloop.router,
        health.router,
        metrics_routes.router,
        dashboard_sign_in.router,  # before dashboard's /ui/{name}
        dashboard.router,
        resource.router,
        credentials.router,
        oauth.router,
    ]
    routes = [route for router in routers for route in router.routes]
    app.state.routes = routes  # a 405's Allow names the methods of every route of the path (http_errors)
    mcp_door = mcp_routes(mcp, settings.max_body_bytes)  # the MCP endpoint at /mcp (and /mcp/)
    # Outside the body limit: a request without a valid key or token is refused before any read.
    app.add_middleware(
        SignIn,
        keyring=keyring if "keys" in settings.auth else None,
        tokens=tokens,
        face=face,
        metrics_public=settings.metrics_public,
        refusals={"/mcp": jsonrpc_refusal, "/mcp/": jsonrpc_refusal, gumloop.PATH: gumloop.refusal},
        routes=[*routes, *mcp_door],
    )
    install_error_handlers(app)
    app.add_middleware(StorageUnavailable)
    # Before anything else reads the request: a rebinding page's request is refused from its headers alone.
    app.add_middleware(HostGuard, policy=host_policy(settings, served_host))
    app.add_middleware(RequestMetrics, metrics=metrics)  # outermost: it sees the 503s, 421s and 401s too
    for router in routers:
        app.include_router(router)
    app.router.routes.extend(mcp_door)
    return app


def sign_in_by_token(
    settings: Settings, keyring: KeyRing | None, http: httpx.AsyncClient
) -> tuple[TokenCheck | None, ResourceFace | None]:
    """The token check and the resource server's face, when auth takes tokens."""
    oauth_complete(settings.auth, settings.oauth_issuers, settings.public_url)  # a ConfigError stops start-up
    if "oauth" not in settings.auth or settings.public_url is None or keyring is None:
        return None, None
    public = settings.public_url
    tokens = TokenCheck(settings.oauth_issuers, [public, public + MCP_PATH], keyring, http)
    mappings = [{right: getattr(issuer.scopes, right.value) for right in Right} for issuer in settings.oauth_issuers]
    face = ResourceFace(public, tuple(tokens.issuers()), face_scopes(mappings), tuple(mappings[0].items()))
    return tokens, face


def host_policy(settings: Settings, served_host: str | None) -> HostPolicy:
    """The hosts and origins served: the settings', and the name the API listens on (an address, or every address,
    needs no entry: the address a request arrived at is served)."""
    parsed = authority(served_host) if served_host else None
    return HostPolicy(tuple(settings.allowed_hosts), tuple(settings.allowed_origins), parsed[0] if parsed else None)
