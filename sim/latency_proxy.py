"""A loopback TCP proxy that delays every chunk by a fixed time each way (the benchmark's SSH
round trip: 10 ms each way = 20 ms per round trip), without touching the shared loopback (no
tc/netem).

    with LatencyProxy(("127.0.0.1", node.port), delay_s=0.010) as proxy:
        env["PVE_SSH_PORT"] = str(proxy.port)    # known_hosts must name [127.0.0.1]:<proxy.port>

Chunks are delayed, not serialized: a chunk read at t leaves at t + delay whatever came before, so
the link has latency and no extra bandwidth limit (a pipelined stream pays the delay once).
"""

from __future__ import annotations

import queue
import socket
import threading
import time


class LatencyProxy:
    def __init__(self, target: tuple[str, int], delay_s: float = 0.010, host: str = "127.0.0.1"):
        self.target = target
        self.delay_s = delay_s
        self._listener = socket.create_server((host, 0))
        self.host, self.port = self._listener.getsockname()[:2]
        self._stopped = threading.Event()
        self._sockets: list[socket.socket] = []
        self.connections = 0

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self):
        self._stopped.set()
        self._listener.close()
        for s in list(self._sockets):
            try:
                s.close()
            except OSError:
                pass

    def _accept(self):
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self.connections += 1
            for s in (client, upstream):  # the delay is the link's; no Nagle wait on top of it
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                self._pipe(src, dst)

    def _pipe(self, src: socket.socket, dst: socket.socket):
        """Two threads per direction: one reads and stamps chunks, one sends each when due."""
        chunks: queue.Queue = queue.Queue()

        def read():
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                chunks.put((time.monotonic() + self.delay_s, data))
                if not data:
                    return

        def send():
            while True:
                due, data = chunks.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                try:
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(data)
                except OSError:
                    return

        for fn in (read, send):
            threading.Thread(target=fn, daemon=True).start()
