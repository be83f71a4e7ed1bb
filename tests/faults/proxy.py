"""A TCP proxy on loopback that can go silent like a network partition, for the partition tests.

It forwards bytes both ways between each client and the target server. `cut()` stops it reading,
writing and accepting, but closes nothing: what either side sends waits in the kernel's buffers (a
partitioned link retransmits), a new connection gets no greeting, and nobody sees a reset or a FIN,
only silence. `heal()` resumes: the bytes held in the meantime are delivered late, as TCP would
deliver them, so a statement a client gave up on may still reach the server after the partition.
One thread, one selector; a pair whose either end closes is closed whole.
"""

from __future__ import annotations

import selectors
import socket
import threading

_CHUNK = 65_536
_TICK_S = 0.05  # how often the loop looks at the cut/heal switch


class Proxy:
    """Forwards 127.0.0.1:`port` to `target`, until `close()`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._peers: dict[socket.socket, socket.socket] = {}
        self._open = threading.Event()
        self._open.set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._cut_pairs: set[socket.socket] = set()  # client ends open when the link was cut
        self.late_bytes = 0  # bytes delivered after a heal on connections opened before the cut
        self._drained = threading.Event()  # since the heal, a look found nothing left of the cut
        self._thread = threading.Thread(target=self._loop, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        """Stop forwarding (and accepting) without closing anything: the link goes silent."""
        with self._lock:
            self._open.clear()
            self._cut_pairs = set(self._peers)

    def heal(self) -> None:
        """Forward again, what waited first."""
        self._drained.clear()
        self._open.set()

    def drained(self) -> bool:
        """Whether, since the heal, everything held on the connections of before the cut went on."""
        return self._drained.is_set()

    def connections(self) -> int:
        """Client connections open through the proxy now."""
        with self._lock:
            return len(self._peers) // 2

    def close(self) -> None:
        self._stop.set()
        self._open.set()
        self._thread.join(5)
        with self._lock:
            for sock in list(self._peers):
                sock.close()
            self._peers.clear()
        self._listener.close()
        self._selector.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._open.is_set():
                self._open.wait(_TICK_S)  # silent: the kernel holds whatever arrives
                continue
            ready = [key.fileobj for key, _ in self._selector.select(_TICK_S)]
            if not any(sock in self._cut_pairs for sock in ready):
                self._drained.set()
            for sock in ready:
                if not self._open.is_set():
                    break
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                else:
                    self._forward(sock)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()  # the server is down: the client sees a closed connection, as it would
            return
        with self._lock:
            for sock in (client, server):
                sock.setblocking(True)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._selector.register(sock, selectors.EVENT_READ)
            self._peers[client], self._peers[server] = server, client

    def _forward(self, sock: socket.socket) -> None:
        peer = self._peers.get(sock)
        if peer is None:
            return
        try:
            data = sock.recv(_CHUNK)
            if data:
                peer.sendall(data)
        except OSError:
            data = b""
        if not data:
            self._drop(sock, peer)
            return
        if sock in self._cut_pairs or peer in self._cut_pairs:
            self.late_bytes += len(data)

    def _drop(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                if self._peers.pop(sock, None) is not None:
                    self._selector.unregister(sock)
                self._cut_pairs.discard(sock)
                sock.close()
