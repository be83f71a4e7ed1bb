"""The bare client loop of bench/io_checks/http_check.py: the same HTTP calls with no duecast at all.

`python http_bare.py --client aiohttp --url URL --calls N --concurrency C` makes N GETs of
URL/users/<i>, C at a time over one client (a pool of at most C connections), and prints one JSON
line: calls, errors, wall and CPU seconds of the loop alone (after imports and set-up). The duecast
handler (http_app.py) makes its calls with `fetch` and `aiohttp_session` from here: the same code,
and by default on the same event loop as a worker's (`--loop duecast`: uvloop where installed;
asyncio's own loop costs about 10% more CPU per call: `--loop asyncio`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp

from duecast.worker.runner import new_event_loop

CLIENTS = ("aiohttp", "httpx")
LOOPS = ("duecast", "asyncio")  # the worker's event loop (worker.runner.new_event_loop), or asyncio's


def raise_open_files() -> None:
    """Let this process open as many sockets as the system allows: a thousand connections per
    process, and the stub's thousands, pass the usual soft limit of 1,024 descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65_536
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def aiohttp_session(limit: int) -> aiohttp.ClientSession:
    """One session per process, at most `limit` connections (kept alive)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit))


async def fetch(session: aiohttp.ClientSession, url: str) -> int:
    """One check's call: GET, read the body, return the status."""
    async with session.get(url) as response:
        await response.read()
        return response.status


async def loop(call: Callable[[int], Awaitable[int]], calls: int, concurrency: int) -> dict[str, float]:
    """`calls` calls, `concurrency` at a time; the wall and CPU seconds they took."""
    counter = iter(range(calls))
    errors = 0

    async def one_lane() -> None:
        nonlocal errors
        for i in counter:
            errors += await call(i) != 200

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one_lane() for _ in range(concurrency)))
    return {
        "calls": calls,
        "errors": errors,
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
    }


async def run(client: str, url: str, calls: int, concurrency: int) -> dict[str, float]:
    if client == "aiohttp":
        async with aiohttp_session(concurrency) as session:
            return await loop(lambda i: fetch(session, f"{url}/users/{i}"), calls, concurrency)
    import httpx  # noqa: PLC0415 (only for the one-off comparison)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits) as httpx_client:

        async def call(i: int) -> int:
            return (await httpx_client.get(f"{url}/users/{i}")).status_code  # get() reads the body

        return await loop(call, calls, concurrency)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--client", choices=CLIENTS, default="aiohttp")
    p.add_argument("--url", required=True)
    p.add_argument("--calls", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--loop", choices=LOOPS, default="duecast", help="duecast: the worker's event loop")
    args = p.parse_args(argv)
    raise_open_files()
    with asyncio.Runner(loop_factory=new_event_loop if args.loop == "duecast" else None) as runner:
        result = runner.run(run(args.client, args.url, args.calls, args.concurrency))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
