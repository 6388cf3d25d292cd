"""/docs and /redoc work offline: every script, style and icon they load is served by the API itself."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.support import ServiceHandle

pytestmark = pytest.mark.timeout(60)

_REFERENCES = re.compile(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_docs_pages_load_their_assets_from_the_api(
    service: ServiceHandle, client: httpx.AsyncClient, page: str
) -> None:
    response = await client.get(page)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert "cdn" not in html.lower() and "https://" not in html and "http://" not in html
    assets = set(_REFERENCES.findall(html))
    assert "/openapi.json" in assets
    scripts = {a for a in assets if a.endswith(".js")}
    assert scripts, html
    for asset in assets:
        assert asset.startswith("/"), asset  # served here, not fetched from elsewhere
        loaded = await client.get(asset)
        assert loaded.status_code == 200, asset
        assert len(loaded.content) > 1000 or asset.endswith(".png"), asset


async def test_swagger_ui_is_told_not_to_call_an_online_validator(client: httpx.AsyncClient) -> None:
    assert '"validatorUrl": null' in (await client.get("/docs")).text
