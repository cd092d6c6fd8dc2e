"""A real PEP 503 "simple" package index over HTTP on 127.0.0.1, serving local wheels.

Two mirrors in one server:
- the torch mirror, like download.pytorch.org: ``<url>/whl/<variant>/`` and
  ``<url>/whl/<variant>/<project>/`` (``torch_index_base = <url>/whl``),
- the package mirror, like PyPI: ``<url>/simple/`` and ``<url>/simple/<project>/``
  (``package_index_url = <url>/simple``).

Files are linked as ``<url>/files/...#sha256=<hex>``, each with its core metadata beside it
(``<file>.metadata``, PEP 658/714), as PyPI does, so installers download a wheel only to install
it. Project names are PEP 503 normalised; another spelling, or a missing trailing slash, is
redirected to the canonical page.

Like download.pytorch.org, the torch mirror also hosts older copies of some of torch's
dependencies (``Wheelhouse.torch_index()``). With ``auth=("user", "token")`` every request needs
HTTP basic auth, as a private mirror does: without it the answer is ``401`` with
``WWW-Authenticate: Basic realm="..."``. ``add()`` of a wheel whose file name is already served
replaces it (and the advertised ``#sha256=``), like a compromised mirror swapping a wheel.

    with PackageIndex({"cu130": [torch_whl]}, [uv_whl]) as index:
        index.torch_index_base, index.package_index_url
        index.requests      # [(method, path), ...] in order served
        index.downloads()   # file names of wheel files served by GET
        index.set_mode("error500")
        index.authorization_headers()  # the Authorization header values received, in order
        release = index.hold("torch-")  # a slow mirror: see hold()
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import shutil
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

MODES = ("normal", "empty", "error500")


def normalize(name: str) -> str:
    """PEP 503 name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _project_of(wheel: Path) -> str:
    return normalize(wheel.name.split("-", 1)[0])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _core_metadata(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if len(names) != 1:
            raise ValueError(f"{wheel.name}: expected one .dist-info/METADATA, found {names}")
        return zf.read(names[0])


class _Repo:
    """One simple repository: project -> {filename: (path, sha256, core metadata)}."""

    def __init__(self):
        self.projects: dict[str, dict[str, tuple[Path, str, bytes]]] = {}

    def add(self, wheel: Path) -> None:
        wheel = Path(wheel)
        if not wheel.is_file():
            raise FileNotFoundError(wheel)
        entry = (wheel, _sha256(wheel), _core_metadata(wheel))
        self.projects.setdefault(_project_of(wheel), {})[wheel.name] = entry


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = False
    #: an ssl.SSLContext (server side): each connection's handshake runs in its own thread
    tls = None
    #: a client address the index answers alone (a site reached only through its proxy)
    only_from = None

    def finish_request(self, request, client_address):
        if self.only_from is not None and client_address[0] != self.only_from:
            request.close()  # not from the proxy: dropped, as a firewall would
            return
        if self.tls is not None:
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (OSError, ValueError):
                request.close()  # a client that does not trust our CA, or speaks no TLS
                return
        super().finish_request(request, client_address)


class PackageIndex:
    def __init__(
        self,
        wheel_dir_torch: dict[str, list[Path]] | None = None,
        wheel_dir_pypi: list[Path] | None = None,
        host: str = "127.0.0.1",
        auth: tuple[str, str] | None = None,
        tls: tuple[str, str] | None = None,
        only_from: str | None = None,
    ):
        """tls: (certificate chain file, key file): serve HTTPS (the URL says https);
        only_from: the one client address answered (e.g. a proxy's source address)."""
        self._host = host
        self._tls = tls
        self._only_from = only_from
        self._auth = auth
        self._authorizations: list[str] = []
        self._lock = threading.Lock()
        self._torch: dict[str, _Repo] = {}
        self._pypi = _Repo()
        self._log: list[tuple[str, str, int]] = []
        self._mode = "normal"
        self._holds: list[tuple[str, threading.Event]] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url: str | None = None
        for variant, wheels in (wheel_dir_torch or {}).items():
            self.add(wheels, variant=variant)
        self.add(wheel_dir_pypi or [])

    # configuration -----------------------------------------------------------------------------
    def add(self, wheels, variant: str | None = None) -> None:
        """Serve more wheels: on the torch mirror under ``variant``, or on the package mirror."""
        with self._lock:
            repo = self._pypi if variant is None else self._torch.setdefault(variant, _Repo())
            for wheel in wheels:
                repo.add(Path(wheel))

    def set_mode(self, mode: str) -> None:
        """``normal``; ``empty`` (every listing empty, every project and file 404); ``error500``."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        with self._lock:
            self._mode = mode

    def hold(self, prefix: str) -> threading.Event:
        """A slow mirror, for as long as a test wants: every GET of a wheel file whose name
        starts with ``prefix`` sends its headers and the first half of its body, then waits
        until the returned event is set (``stop()`` sets it too), then sends the rest. The
        client sees a download in progress: its bytes arrive, the transfer does not end."""
        release = threading.Event()
        with self._lock:
            self._holds.append((prefix, release))
        return release

    def _held(self, name: str) -> list[threading.Event]:
        with self._lock:
            return [event for prefix, event in self._holds if name.startswith(prefix)]

    # lifecycle ---------------------------------------------------------------------------------
    def start(self) -> PackageIndex:
        if self._server is not None:
            return self
        server = _Server((self._host, 0), self._handler_class())
        if self._tls is not None:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self._tls)
            server.tls = context
        server.only_from = self._only_from
        self._server = server
        scheme = "https" if self._tls is not None else "http"
        self.url = f"{scheme}://{self._host}:{server.server_address[1]}"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name=f"PackageIndex {self.url}",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        with self._lock:
            for _, release in self._holds:
                release.set()  # no request thread stays stalled
        if server is None:
            return
        try:
            server.shutdown()
        finally:
            server.server_close()
            if thread is not None:
                thread.join()

    def __enter__(self) -> PackageIndex:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def torch_index_base(self) -> str:
        return f"{self._require_url()}/whl"

    @property
    def package_index_url(self) -> str:
        return f"{self._require_url()}/simple"

    def torch_index_url(self, variant: str) -> str:
        return f"{self.torch_index_base}/{variant}"

    def _require_url(self) -> str:
        if self.url is None:
            raise RuntimeError("PackageIndex not started")
        return self.url

    # observation -------------------------------------------------------------------------------
    @property
    def requests(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(m, p) for m, p, _ in self._log]

    def downloads(self) -> list[str]:
        """Names of wheel files served (GET, 200), in order."""
        with self._lock:
            log = list(self._log)
        return [
            unquote(urlsplit(p).path.rsplit("/", 1)[-1])
            for m, p, status in log
            if m == "GET"
            and status == 200
            and urlsplit(p).path.startswith("/files/")
            and urlsplit(p).path.endswith(".whl")
        ]

    def clear_requests(self) -> None:
        with self._lock:
            self._log.clear()
            self._authorizations.clear()

    def authorization_headers(self) -> list[str]:
        """The ``Authorization`` header values received (empty strings for none), in order."""
        with self._lock:
            return list(self._authorizations)

    def _authorized(self, header: str | None) -> bool:
        with self._lock:
            self._authorizations.append(header or "")
        if self._auth is None:
            return True
        user, token = self._auth
        expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()
        return header == expected

    def _record(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self._log.append((method, path, status))

    # routing -----------------------------------------------------------------------------------
    def _resolve(self, path: str):
        """-> (status, headers, body bytes or file Path)."""
        with self._lock:
            mode = self._mode
            torch = {v: {p: dict(f) for p, f in r.projects.items()} for v, r in self._torch.items()}
            pypi = {p: dict(f) for p, f in self._pypi.projects.items()}
        if mode == "error500":
            return 500, {}, b"Internal Server Error\n"
        empty = mode == "empty"
        parts = [unquote(p) for p in path.split("/")[1:]]
        trailing = path.endswith("/")
        parts = [p for p in parts if p != ""]

        def page(title, links):
            body = [
                "<!DOCTYPE html>",
                "<html>",
                f"<head><title>{html.escape(title)}</title></head>",
                "<body>",
                f"<h1>{html.escape(title)}</h1>",
            ]
            for href, text, *attrs in links:
                extra = "".join(
                    f' {k}="{html.escape(v)}"' for k, v in (attrs[0] if attrs else {}).items()
                )
                body.append(f'<a href="{html.escape(href)}"{extra}>{html.escape(text)}</a><br/>')
            body += ["</body>", "</html>", ""]
            return 200, {"Content-Type": "text/html; charset=utf-8"}, "\n".join(body).encode()

        def redirect(to):
            return 301, {"Location": to}, b""

        def listing(prefix, projects, title):
            names = [] if empty else sorted(projects)
            return page(title, [(f"{prefix}/{n}/", n) for n in names])

        def project_page(prefix, files_prefix, projects, name):
            canonical = normalize(name)
            if empty or canonical not in projects:
                return 404, {}, b"Not Found\n"
            if canonical != name or not trailing:
                return redirect(f"{prefix}/{canonical}/")
            links = []
            for fn, (_, sha, meta) in sorted(projects[canonical].items()):
                # PEP 658/714: the wheel's METADATA is served beside it at <file>.metadata
                meta_hash = "sha256=" + hashlib.sha256(meta).hexdigest()
                attrs = {"data-core-metadata": meta_hash, "data-dist-info-metadata": meta_hash}
                links.append((f"{files_prefix}/{quote(fn)}#sha256={sha}", fn, attrs))
            return page(f"Links for {canonical}", links)

        def file(projects, filename):
            if empty:
                return 404, {}, b"Not Found\n"
            for files in projects.values():
                if filename in files:
                    return 200, {"Content-Type": "application/octet-stream"}, files[filename][0]
                if filename.endswith(".metadata") and filename[: -len(".metadata")] in files:
                    meta = files[filename[: -len(".metadata")]][2]
                    return 200, {"Content-Type": "application/octet-stream"}, meta
            return 404, {}, b"Not Found\n"

        if not parts:
            return page("pvegpu sim index", [("/simple/", "simple"), ("/whl/", "whl")])
        if parts[0] == "simple":
            if len(parts) == 1:
                return (
                    listing("/simple", pypi, "Simple index") if trailing else redirect("/simple/")
                )
            if len(parts) == 2:
                return project_page("/simple", "/files/simple", pypi, parts[1])
        elif parts[0] == "whl":
            if len(parts) == 1:
                return page("whl", [] if empty else [(f"/whl/{v}/", v) for v in sorted(torch)])
            variant = parts[1]
            if variant in torch:
                prefix = f"/whl/{variant}"
                if len(parts) == 2:
                    title = f"Simple index ({variant})"
                    return (
                        listing(prefix, torch[variant], title)
                        if trailing
                        else redirect(prefix + "/")
                    )
                if len(parts) == 3:
                    return project_page(prefix, f"/files/whl/{variant}", torch[variant], parts[2])
        elif parts[0] == "files":
            if len(parts) == 3 and parts[1] == "simple":
                return file(pypi, parts[2])
            if len(parts) == 4 and parts[1] == "whl" and parts[2] in torch:
                return file(torch[parts[2]], parts[3])
        return 404, {}, b"Not Found\n"

    def _handler_class(self):
        index = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "pvegpu-sim-index/1"
            timeout = 60

            def log_message(self, format, *args):  # noqa: A002 - quiet
                pass

            def _serve(self, send_body: bool):
                if index._authorized(self.headers.get("Authorization")):
                    status, headers, body = index._resolve(urlsplit(self.path).path)
                else:
                    status, body = 401, b"Unauthorized\n"
                    headers = {"WWW-Authenticate": 'Basic realm="pvegpu-sim index"'}
                index._record(self.command, self.path, status)
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    if isinstance(body, Path):
                        self.send_header("Content-Length", str(body.stat().st_size))
                        self.end_headers()
                        if send_body:
                            with open(body, "rb") as f:
                                held = index._held(body.name) if body.suffix == ".whl" else []
                                if held:
                                    self.wfile.write(f.read(body.stat().st_size // 2))
                                    self.wfile.flush()
                                    for release in held:
                                        release.wait(timeout=300)  # a bound for a lost test
                                shutil.copyfileobj(f, self.wfile, 1 << 20)
                    else:
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        if send_body:
                            self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                self._serve(True)

            def do_HEAD(self):
                self._serve(False)

        return Handler


def main(argv=None) -> int:
    """``python -m sim.index [DIR]``: build the wheelhouse into DIR, serve it until Ctrl-C."""
    import sys
    import tempfile

    from sim.wheels import build_wheelhouse

    args = list(sys.argv[1:] if argv is None else argv)
    out = args[0] if args else tempfile.mkdtemp(prefix="pvegpu-wheelhouse-")
    house = build_wheelhouse(out)
    with PackageIndex(house.torch_index(), house.pypi()) as index:
        print(f"torch_index_base={index.torch_index_base}")
        print(f"package_index_url={index.package_index_url}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
