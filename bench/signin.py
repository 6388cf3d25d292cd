"""What signing in costs the API: a request authenticated by a JWT access token against one authenticated by an API
key, server-side, side by side.

    uv run python bench/signin.py [--rounds 10] [--block 300]

`mcp-batch api` of this checkout with `MCP_BATCH_AUTH=keys,oauth` on a private redis-server, no worker. The issuer
is a small discovery + JWKS server in this process (loopback: the service fetches its keys once, then checks every
token's ES256 signature and claims itself); the token is for the tenant `bench` with `read write`, the key a keys-file
entry of the same tenant; and, as a third kind, a token never seen before on every request (what a client's first
request with a token costs: the service keeps a checked token's caller until it expires). `GET /v1/servers` (a
cheap route, so signing in is a large part of it), in blocks of `--block` requests of one kind, the kinds
interleaved block by block for `--rounds` rounds so drift hits them alike.
Server-side time per request: the API process's CPU time (user + system, from /proc) over a block, divided by its
requests; the wall time per request beside it. The machine is shared: quote the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from harness import cpu_seconds, current_tree, free_port, load, machine, service_stack  # the script's folder
from joserfc import jwt
from joserfc.jwk import ECKey

PUBLIC_URL = "https://batches.bench.example"
KEY = "mcpb_bench-key"


def start_issuer(key: ECKey) -> tuple[str, ThreadingHTTPServer]:
    """Discovery and JWKS on a loopback port, in a thread: the issuer's URL and its server."""
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    documents = {
        "/.well-known/openid-configuration": {"issuer": issuer, "jwks_uri": f"{issuer}/jwks"},
        "/jwks": {"keys": [key.as_dict(private=False)]},
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            document = documents.get(self.path)
            body = json.dumps(document).encode() if document else b"{}"
            self.send_response(200 if document else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return issuer, server


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=300, help="requests of one kind in a row")
    args = parser.parse_args()
    key = ECKey.generate_key("P-256", parameters={"kid": "bench", "use": "sig", "alg": "ES256"})
    issuer, issuer_server = start_issuer(key)
    now = int(time.time())
    claims = {"iss": issuer, "aud": PUBLIC_URL, "iat": now, "exp": now + 3600, "scope": "read write", "tenant": "bench"}
    header = {"alg": "ES256", "typ": "at+jwt", "kid": "bench"}
    token = jwt.encode(header, claims, key)
    # Tokens never seen, one per request: each one's signature and claims checked (a client's first request with it).
    fresh = [jwt.encode(header, claims | {"jti": str(n)}, key) for n in range(args.rounds * args.block)]
    servers = {"mcpServers": {"demo": {"command": "mcp-batch", "args": ["demo-backend"]}}}  # never started
    with tempfile.TemporaryDirectory(prefix="mcp-batch-bench-keys-") as tmp:
        keys = Path(tmp) / "keys.json"
        keys.write_text(json.dumps({"keys": [{"sha256": hashlib.sha256(KEY.encode()).hexdigest(), "tenant": "bench"}]}))
        settings = {
            "MCP_BATCH_AUTH": "keys,oauth",
            "MCP_BATCH_KEYS": str(keys),
            "MCP_BATCH_PUBLIC_URL": PUBLIC_URL,
            "MCP_BATCH_OAUTH_ISSUERS": json.dumps([{"issuer": issuer}]),
        }
        async with service_stack(current_tree(), servers, 0, settings) as stack:
            kinds = {"JWT": [token], "JWT, a new one each request": fresh, "API key": [KEY]}
            cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
            wall: dict[str, list[float]] = {kind: [] for kind in kinds}
            for credential in (token, KEY):  # warm-up: the issuer's keys fetched, the route's first answer
                warm = await stack.http.get("/v1/servers", headers={"Authorization": f"Bearer {credential}"})
                warm.raise_for_status()
            for round_ in range(args.rounds):
                for kind, credentials in kinds.items():
                    block = [credentials[(round_ * args.block + n) % len(credentials)] for n in range(args.block)]
                    cpu_before, started = cpu_seconds(stack.api_pid), time.perf_counter()
                    for credential in block:
                        headers = {"Authorization": f"Bearer {credential}"}
                        (await stack.http.get("/v1/servers", headers=headers)).raise_for_status()
                    wall[kind].append((time.perf_counter() - started) / args.block * 1e6)
                    cpu[kind].append((cpu_seconds(stack.api_pid) - cpu_before) / args.block * 1e6)
    issuer_server.shutdown()
    print(f"machine: {machine()}; load average {load()}")
    print(f"GET /v1/servers, {args.rounds} rounds of {args.block} requests of each kind, interleaved by block")
    print("| signed in by | API CPU us / request (median of blocks) | wall us / request | CPU / API key's |")
    print("|---|---|---|---|")
    base = statistics.median(cpu["API key"])
    for kind in kinds:
        median = statistics.median(cpu[kind])
        print(f"| {kind} | {median:.0f} | {statistics.median(wall[kind]):.0f} | {median / base:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
