"""The dashboard at /ui: static files (service/ui/) for a page that reads the REST API from the browser.

The files need no key: they hold no data, and the page asks the API for everything with the caller's own key, so a
tenant sees there exactly what the API shows it. A strict Content-Security-Policy (scripts, styles and requests from
this origin only, no inline script or style, no frames, no plugins) keeps whatever a tool returned, shown in the
page, from ever running as code there.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from mcp_batch.models import FAILED_ITEM, TERMINAL_BATCH, TERMINAL_ITEM, BatchStatus, Counts, ItemStatus

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
STATUSES = "statuses.js"  # made here, from the models (not a file of ui/)

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


def content_security_policy(connect: tuple[str, ...] = ()) -> str:
    """The page's policy; `connect`: origins it may fetch from besides its own (the sign-in's identity provider)."""
    return "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            " ".join(["connect-src 'self'", *connect]),
            "img-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )


CONTENT_SECURITY_POLICY = content_security_policy()

_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # always revalidated (cheaply, by ETag), so a new release is seen at once
}

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    etag: str


def _asset(body: bytes, media_type: str) -> Asset:
    return Asset(body, media_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


def statuses_js() -> bytes:
    """The page's status sets and count names, made from mcp_batch/models.py: the page imports them, never copies
    them."""
    order = list(ItemStatus)
    failed = [status for status in order if status in FAILED_ITEM]
    final = sorted(TERMINAL_ITEM, key=lambda s: (s is not ItemStatus.ok, s not in FAILED_ITEM, order.index(s)))
    terminal = [status for status in BatchStatus if status in TERMINAL_BATCH]
    lines = [
        "// The statuses and counts of mcp_batch/models.py, served by the API: the page imports them from here.",
        f"export const BATCH_STATUSES = {json.dumps(list(BatchStatus))};",
        f"export const TERMINAL = new Set({json.dumps(terminal)});",
        "// Final item statuses: ok, those that count as failures, then those the batch ended (skipped, cancelled...).",
        f"export const FINAL_ITEM_STATUSES = {json.dumps(final)};",
        f"export const FAILED = {json.dumps(failed)};",
        "// A document's counts, in their order.",
        f"export const COUNTS = {json.dumps(list(Counts.model_fields))};",
    ]
    return ("\n".join(lines) + "\n").encode()


@cache
def assets() -> dict[str, Asset]:
    """The dashboard's files by name, read once, and the status sets made from the models."""
    found = {}
    for path in sorted(UI_DIR.iterdir()):
        media_type = _TYPES.get(path.suffix)
        if media_type is not None and path.is_file():
            found[path.name] = _asset(path.read_bytes(), media_type)
    return found | {STATUSES: _asset(statuses_js(), _TYPES[".js"])}


def _serve(name: str, request: Request) -> Response:
    asset = assets().get(name)
    if asset is None:
        return JSONResponse({"detail": "not found"}, status_code=404, headers={"X-Content-Type-Options": "nosniff"})
    policy = getattr(request.app.state, "dashboard_policy", CONTENT_SECURITY_POLICY)
    headers = _HEADERS | {"Content-Security-Policy": policy, "ETag": asset.etag}
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


@router.get("/ui")
async def dashboard_root() -> Response:
    # Relative, so the page's own relative links (assets, the API beside it) work behind a path prefix too.
    return RedirectResponse("ui/", status_code=307)


@router.get("/ui/")
async def dashboard(request: Request) -> Response:
    """The dashboard's page; which view it shows is in the URL's fragment (#/batches, #/batch/<id>, #/backends)."""
    return _serve("index.html", request)


@router.get("/ui/{name}")
async def dashboard_asset(name: str, request: Request) -> Response:
    """One of the page's scripts (the files of service/ui/, and the status sets), its style sheet or its icon."""
    return _serve(name, request)
