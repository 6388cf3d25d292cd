"""Priority and the dry run's estimate on a rate-limited backend, with the service as processes (2 workers).

    uv run python bench/priority.py [--rounds 3] [--rate 20] [--workers 2]

Against a backend limited to `--rate` calls/s (burst 1; tests/fault_backend.py over streamable HTTP, its `stamp`
tool), each round measures, for one tenant:
  1. a 20-call batch alone (its seconds from POST to the completed document; max_concurrency 20), `high` and
     `normal`;
  2. the same 20 calls beside a running 5,000-call batch: `high` beside `low`, then (no priority) `normal` beside
     `normal`; and the big batch's calls/s before and while the small one runs (its minimum share is a tenth);
  3. the dry run's estimate of a 200-call batch against its actual wall time.
Every figure is the median over the rounds. The machine may be shared: quote the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import httpx
from harness import ROOT, current_tree, free_port, load, machine, service_stack  # the script's own folder

from mcp_batch_cli.dev import demo_http_backend

SMALL, BIG = 20, 5_000


def stamps(n: int) -> list[dict[str, Any]]:
    return [{"server": "limited", "tool": "stamp", "arguments": {}} for _ in range(n)]


async def timed(http: httpx.AsyncClient, n: int, priority: str) -> float:
    """Seconds from POST to the completed document of `n` calls, all in flight at once (max_concurrency n)."""
    start = time.perf_counter()
    body = {"calls": stamps(n), "priority": priority, "max_concurrency": min(n, 256)}
    batch_id = (await http.post("/v1/batches", json=body)).json()["id"]
    while (await http.get(f"/v1/batches/{batch_id}", params={"wait": 60, "limit": 0})).json()["status"] != "completed":
        pass
    return time.perf_counter() - start


async def done(http: httpx.AsyncClient, batch_id: str) -> int:
    return int((await http.get(f"/v1/batches/{batch_id}", params={"limit": 0})).json()["counts"]["succeeded"])


async def beside(http: httpx.AsyncClient, small: str, big: str) -> tuple[float, float, float]:
    """The small batch's seconds beside a running big one, and the big one's calls/s before and meanwhile."""
    big_id = (await http.post("/v1/batches", json={"calls": stamps(BIG), "priority": big})).json()["id"]
    first = 0
    while first < 20:  # progress has no event: poll
        await asyncio.sleep(0.05)
        first = await done(http, big_id)
    first, start = await done(http, big_id), time.perf_counter()
    await asyncio.sleep(1.0)  # the big batch alone, for a second
    second, middle = await done(http, big_id), time.perf_counter()
    seconds = await timed(http, SMALL, small)
    third, end = await done(http, big_id), time.perf_counter()
    await http.post(f"/v1/batches/{big_id}/cancel")
    await http.get(f"/v1/batches/{big_id}", params={"wait": 60, "limit": 0})
    return seconds, (second - first) / (middle - start), (third - second) / (end - middle)


async def estimated(http: httpx.AsyncClient) -> tuple[float, float]:
    body = {"calls": stamps(200), "max_concurrency": 200}
    estimate = (await http.post("/v1/batches:validate", json=body)).json()["estimate"]
    return float(estimate["seconds"]), await timed(http, 200, "normal")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    port = free_port()
    limited = {"url": f"http://127.0.0.1:{port}/mcp", "rate_limit": {"per_second": args.rate, "burst": 1}}
    figures: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    tree = current_tree()
    servers = {"mcpServers": {"limited": limited}}
    async with (
        demo_http_backend(port, "tests.fault_backend", ROOT),
        service_stack(tree, servers, args.workers) as stack,
    ):
        http = stack.http
        await timed(http, 4 * args.workers, "normal")  # every worker's session open, a latency sample
        for _ in range(args.rounds):
            note("high alone", await timed(http, SMALL, "high"))
            note("normal alone", await timed(http, SMALL, "normal"))
            seconds, before, meanwhile = await beside(http, "high", "low")
            note("high beside low", seconds)
            note("low calls/s alone", before)
            note("low calls/s meanwhile", meanwhile)
            seconds, before, meanwhile = await beside(http, "normal", "normal")
            note("normal beside normal", seconds)
            note("big normal calls/s meanwhile", meanwhile)
            guess, actual = await estimated(http)
            note("estimate 200", guess)
            note("actual 200", actual)
    m = {name: statistics.median(values) for name, values in figures.items()}
    print(f"machine: {machine()}; load {load()}; {tree.label}; {args.workers} workers, {args.rounds} rounds")
    print(f"backend: {args.rate:g} calls/s, burst 1; small batch {SMALL} calls, big batch {BIG} calls (medians)")
    print("| figure | high (big one low) | normal (big one normal, no priority) |")
    print("|---|---|---|")
    print(f"| 20 calls alone, s | {m['high alone']:.3f} | {m['normal alone']:.3f} |")
    print(f"| 20 calls beside the big batch, s | {m['high beside low']:.3f} | {m['normal beside normal']:.3f} |")
    ratio_high, ratio_normal = m["high beside low"] / m["high alone"], m["normal beside normal"] / m["normal alone"]
    print(f"| beside / alone (required: <= 1.5 for high) | {ratio_high:.2f} | {ratio_normal:.2f} |")
    print(f"| big batch calls/s before | {m['low calls/s alone']:.1f} | - |")
    print(
        f"| big batch calls/s meanwhile | {m['low calls/s meanwhile']:.1f} | {m['big normal calls/s meanwhile']:.1f} |"
    )
    error = (m["estimate 200"] - m["actual 200"]) / m["actual 200"]
    print(f"estimate of 200 calls: {m['estimate 200']:.3f} s; actual {m['actual 200']:.3f} s; error {error:+.1%}")


if __name__ == "__main__":
    asyncio.run(main())
