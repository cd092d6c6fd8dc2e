"""A loopback HTTP proxy in front of the sim's package index that holds chosen requests until the
test releases them: a deterministic point to interrupt a deploy at (no sleeps, no timings).

    with StallProxy(index.url, lambda path: "/files/torch-" in path) as proxy:
        ...  # point torch_index_base at proxy.url + "/whl"
        assert proxy.reached.wait(600)  # a matching request is now held
        proxy.release()
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StallProxy:
    def __init__(self, upstream: str, stall_when):
        self.upstream = upstream.rstrip("/")
        self.stall_when = stall_when
        self.reached = threading.Event()
        self._go = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def release(self):
        self._go.set()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _forward(self, body: bool):
                if proxy.stall_when(self.path) and not proxy._go.is_set():
                    proxy.reached.set()
                    proxy._go.wait()
                req = urllib.request.Request(proxy.upstream + self.path, method=self.command)
                opener = urllib.request.build_opener(NoRedirect)
                try:
                    resp = opener.open(req, timeout=60)
                except urllib.error.HTTPError as e:
                    resp = e
                data = resp.read() if body else b""
                try:
                    self.send_response(resp.status if hasattr(resp, "status") else resp.code)
                    for key in ("Content-Type", "Location"):
                        if resp.headers.get(key):
                            self.send_header(key, resp.headers[key])
                    self.send_header(
                        "Content-Length",
                        str(len(data) if body else resp.headers.get("Content-Length", 0)),
                    )
                    self.end_headers()
                    if body:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                self._forward(True)

            def do_HEAD(self):
                self._forward(False)

        return Handler


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """Pass the index's redirects to the client unchanged (they are root-relative)."""

    def redirect_request(self, *args, **kwargs):
        return None
