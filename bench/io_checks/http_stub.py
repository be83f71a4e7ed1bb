"""The stub service of bench/io_checks/http_check.py and capacity.py: answers every GET with 200 "ok"
after --delay s; with --rate R, a service of limited capacity (asyncio kind only).

`python http_stub.py --kind asyncio --port P` serves HTTP/1.1 with keep-alive on 127.0.0.1:P until
SIGTERM, and prints "ready" once it listens. Two kinds: `asyncio`, a minimal server on asyncio's
Protocol (it reads a request up to its blank line and writes one fixed response after the delay;
the clients send GETs without bodies), and `aiohttp`, aiohttp's web server. Several processes can
share a port (SO_REUSEPORT) when one stub is not enough.

--rate R: at most R answers a second (a token bucket without burst: each request takes the next
free slot, 1/R s after the last). A request whose slot is more than --max-wait s away is never
answered: past its capacity the service times its callers out, as an overloaded one does.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from aiohttp import web
from http_bare import raise_open_files

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
END_OF_HEAD = b"\r\n\r\n"


class Capacity:
    """The process's answer slots: at most `rate` a second, none further than `max_wait_s` ahead."""

    def __init__(self, rate: float, max_wait_s: float) -> None:
        self.rate, self.max_wait_s = rate, max_wait_s
        self.next_at = 0.0
        self.dropped = 0

    def slot_in(self, now: float) -> float | None:
        """Seconds until this request's answer slot, or None: past capacity, never answered."""
        if self.rate <= 0:
            return 0.0
        at = max(now, self.next_at)
        if at - now > self.max_wait_s:
            self.dropped += 1
            return None
        self.next_at = at + 1 / self.rate
        return at - now


class MinimalHttp(asyncio.Protocol):
    """One connection: each request head read schedules one response `delay` s later, in order."""

    def __init__(self, delay_s: float, capacity: Capacity | None = None) -> None:
        self.delay_s = delay_s
        self.capacity = capacity
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        loop = asyncio.get_running_loop()
        while (end := self.buffer.find(END_OF_HEAD)) >= 0:
            self.buffer = self.buffer[end + len(END_OF_HEAD) :]
            wait = 0.0 if self.capacity is None else self.capacity.slot_in(loop.time())
            if wait is not None:
                loop.call_later(wait + self.delay_s, self.answer)

    def answer(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(RESPONSE)


async def serve(kind: str, port: int, delay_s: float, capacity: Capacity | None = None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    if kind == "asyncio":
        server = await loop.create_server(
            lambda: MinimalHttp(delay_s, capacity), "127.0.0.1", port, reuse_port=True
        )
        print("ready", flush=True)
        async with server:
            await stop.wait()
        return

    async def answer(request: web.Request) -> web.Response:
        await asyncio.sleep(delay_s)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, reuse_port=True).start()
    print("ready", flush=True)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--kind", choices=("asyncio", "aiohttp"), default="asyncio")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--delay", type=float, default=0.02)
    p.add_argument("--rate", type=float, default=0.0, help="answers per second at most (0: no limit)")
    p.add_argument("--max-wait", type=float, default=1.0, help="past this wait for a slot: no answer")
    args = p.parse_args(argv)
    if args.rate and args.kind != "asyncio":
        p.error("--rate needs --kind asyncio")
    raise_open_files()
    capacity = Capacity(args.rate, args.max_wait) if args.rate else None
    asyncio.run(serve(args.kind, args.port, args.delay, capacity))
    return 0


if __name__ == "__main__":
    sys.exit(main())
