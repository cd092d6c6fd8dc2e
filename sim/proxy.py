"""``ConnectProxy``: an HTTP CONNECT proxy on loopback, as a site's outbound proxy (squid and the
like) is used for HTTPS: the client sends ``CONNECT host:port HTTP/1.1``, the proxy answers
``HTTP/1.1 200 Connection established`` and relays bytes both ways (RFC 9110 9.3.6). It
connects out from ``source`` (an address of 127.0.0.0/8), so an index that answers only that
address is reachable only through it. Every CONNECT target is recorded. Plain ``GET
http://...`` is refused (405): the indexes are HTTPS.
"""

from __future__ import annotations

import select
import socket
import threading


class ConnectProxy:
    def __init__(self, host: str = "127.0.0.1", source: str = "127.0.0.3"):
        if not host.startswith("127.") or not source.startswith("127."):
            raise ValueError("the proxy listens and connects on loopback only")
        self.host, self.source = host, source
        self.targets: list[str] = []
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        assert self._sock is not None, "ConnectProxy not started"
        return f"http://{self.host}:{self._sock.getsockname()[1]}"

    def start(self) -> ConnectProxy:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind((self.host, 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)
        self._thread = threading.Thread(target=self._serve, daemon=True, name="ConnectProxy")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for c in list(self._conns):
                c.close()
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> ConnectProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _track(self, *socks: socket.socket) -> None:
        with self._lock:
            self._conns.update(socks)

    def _handle(self, client: socket.socket) -> None:
        self._track(client)
        upstream = None
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            first = head.split(b"\r\n", 1)[0].decode(errors="replace").split()
            if len(first) < 2 or first[0] != "CONNECT":
                client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            target = first[1]
            host, _, port = target.rpartition(":")
            self.targets.append(target)
            upstream = socket.create_connection(
                (host.strip("[]"), int(port)), timeout=10, source_address=(self.source, 0)
            )
            self._track(upstream)
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = head.split(b"\r\n\r\n", 1)[1]
            if rest:
                upstream.sendall(rest)
            self._relay(client, upstream)
        except (OSError, ValueError):
            pass
        finally:
            client.close()
            if upstream is not None:
                upstream.close()

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        a.settimeout(None)
        b.settimeout(None)
        while not self._stop.is_set():
            ready, _, _ = select.select([a, b], [], [], 0.2)
            for s in ready:
                data = s.recv(65536)
                if not data:
                    return
                (b if s is a else a).sendall(data)
