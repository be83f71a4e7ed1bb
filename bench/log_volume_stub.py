"""The failing downstream service of bench/log_volume.py: every request fails, as a broken one does.

`python log_volume_stub.py` listens on a free port of 127.0.0.1 and prints "ready <port>". A GET of
/hang/... is read and never answered (the caller's client times out); any other request gets HTTP 500
with a small HTML body, over a kept-alive connection. Serves until SIGTERM. The third kind of failure,
a refused connection, needs no server: the app calls a port nobody listens on.
"""

from __future__ import annotations

import asyncio
import signal
import sys

BODY = (
    b"<html><head><title>500 Internal Server Error</title></head><body><h1>Internal Server Error</h1>"
    b"<p>upstream users-db:5432 refused the connection</p></body></html>"
)
RESPONSE = (
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/html\r\n"
    + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
    + BODY
)
END_OF_HEAD = b"\r\n\r\n"


class Failing(asyncio.Protocol):
    """One connection: each request head read is answered with the 500 at once, or never (/hang/)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(END_OF_HEAD)) >= 0:
            head, self.buffer = self.buffer[:end], self.buffer[end + len(END_OF_HEAD) :]
            if not head.startswith(b"GET /hang/") and self.transport is not None:
                self.transport.write(RESPONSE)


async def serve() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    server = await loop.create_server(Failing, "127.0.0.1", 0)
    print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(serve())
    sys.exit(0)
