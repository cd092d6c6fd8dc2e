"""A Debian package mirror over HTTP on 127.0.0.1: what an air-gapped site's local mirror is.

The simulated containers reach only loopback, so the packages a deploy installs with apt come
from here: real .deb files (the kmod package of this machine's Debian, fetched once with
`apt-get download` into a cache) behind a standard repository layout that real apt reads:

    <url>/dists/<codename>/Release
    <url>/dists/<codename>/main/binary-amd64/Packages (+ Packages.gz)
    <url>/pool/main/<letter>/<package>/<file>.deb

No InRelease/Release.gpg: a container names it ``deb [trusted=yes] <url> <codename> main``.

    deb = ensure_deb("kmod")                  # cached in ~/.cache/pvegpu-sim/debs
    with AptMirror([deb]) as mirror:
        mirror.source_line              # "deb [trusted=yes] http://127.0.0.1:PORT/debian ..."
        mirror.downloads()                     # .deb file names served by GET
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

DEFAULT_DEB_CACHE = Path("~/.cache/pvegpu-sim/debs")


def host_codename(root: str = "/") -> str:
    """VERSION_CODENAME of the Debian at `root` (``bookworm`` on Debian 12)."""
    for line in Path(root, "etc/os-release").read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME":
            return value.strip().strip('"')
    raise RuntimeError(f"{root}etc/os-release names no VERSION_CODENAME")


def installed_version(package: str) -> str | None:
    """The version of `package` dpkg has installed on this machine, or None."""
    p = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}${Version}", package],
        capture_output=True,
        text=True,
    )
    out = p.stdout.strip()
    return out[3:].strip() if p.returncode == 0 and out.startswith("ii") else None


def ensure_deb(package: str, version: str | None = None, cache_dir=None) -> Path:
    """The .deb of `package` (`version`, default: the one this machine's libkmod2 pins for kmod,
    else the installed one), downloaded once with `apt-get download` and reused afterwards.

    >>> ensure_deb("kmod").name  # doctest: +SKIP
    'kmod_30+20221128-1_amd64.deb'
    """
    cache = Path(cache_dir or os.environ.get("PVE_SIM_DEB_CACHE") or DEFAULT_DEB_CACHE).expanduser()
    # kmod Depends on libkmod2 of exactly its own version: take the one this machine has.
    version = (
        version
        or installed_version(package)
        or (installed_version("libkmod2") if package == "kmod" else None)
    )
    pattern = f"{package}_{version.replace(':', '%3a')}_*.deb" if version else f"{package}_*.deb"
    found = sorted(cache.glob(pattern))
    if found:
        return found[-1]
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        if _user_exists("_apt"):  # apt downloads as _apt: let it write here (no warning)
            shutil.chown(tmp, user="_apt")
        spec = f"{package}={version}" if version else package
        p = subprocess.run(
            ["apt-get", "download", "-q", spec],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=600,
        )
        debs = list(Path(tmp).glob("*.deb"))
        if p.returncode != 0 or len(debs) != 1:
            raise RuntimeError(f"apt-get download {spec} failed: {(p.stderr or p.stdout).strip()}")
        os.replace(debs[0], cache / debs[0].name)
        return cache / debs[0].name


def ensure_toolchain_debs(tree, cache_dir=None) -> list[Path]:
    """The .debs of what the sim's Debian `tree` has only for its C compiler and Python headers
    (sim.pvelxc.toolchain_packages: gcc, libpython3.X-dev and what only they need), and every
    package of its python3.X source, each of the tree's own version: a container made as the
    real templates are (``template_toolchain=False``: without the toolchain, its python3.X one
    update older, sim/debarchive.py) installs them from the loopback mirror, which serves only
    that one, newer version, as Debian's archive does. About 43 packages, 60 MiB on Debian 12;
    cached.
    """
    from sim.debarchive import python_packages
    from sim.pvelxc import toolchain_packages

    wanted = toolchain_packages(tree)
    wanted.update(python_packages(Path(tree, "var/lib/dpkg/status").read_text()))
    return [ensure_deb(name, version, cache_dir) for name, version in sorted(wanted.items())]


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _digests(data: bytes) -> tuple[str, str]:
    return hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest()


def packages_stanza(deb: Path, filename: str) -> str:
    """The Packages index entry of `deb` (its control fields, then Filename, Size, MD5sum,
    SHA256 before Description, like dpkg-scanpackages writes them)."""
    control = subprocess.run(
        ["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    fields, current = [], None
    for line in control.splitlines():
        if line[:1] in (" ", "\t") and current is not None:
            current.append(line)
        elif line.strip():
            current = [line]
            fields.append(current)
    data = deb.read_bytes()
    md5, sha256 = _digests(data)
    extra = [
        [f"Filename: {filename}"],
        [f"Size: {len(data)}"],
        [f"MD5sum: {md5}"],
        [f"SHA256: {sha256}"],
    ]
    desc = [f for f in fields if f[0].startswith("Description:")]
    rest = [f for f in fields if not f[0].startswith("Description:")]
    return "\n".join("\n".join(f) for f in rest + extra + desc) + "\n"


def build_tree(root: Path, debs, codename: str, component="main", arch="amd64") -> None:
    """Write the repository (pool, Packages, Packages.gz, Release) under `root`."""
    stanzas = []
    for deb in map(Path, debs):
        name = deb.name.split("_", 1)[0]
        rel = f"pool/{component}/{name[0]}/{name}/{deb.name}"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(deb, root / rel)
        stanzas.append(packages_stanza(deb, rel))
    index_dir = f"{component}/binary-{arch}"
    dist = root / "dists" / codename
    (dist / index_dir).mkdir(parents=True, exist_ok=True)
    packages = "\n".join(stanzas).encode()
    (dist / index_dir / "Packages").write_bytes(packages)
    (dist / index_dir / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))
    files = [f"{index_dir}/Packages", f"{index_dir}/Packages.gz"]
    sums = {f: (_digests((dist / f).read_bytes()), (dist / f).stat().st_size) for f in files}
    release = [
        "Origin: pve-sim",
        "Label: pve-sim local mirror",
        f"Suite: {codename}",
        f"Codename: {codename}",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        f"Architectures: {arch}",
        f"Components: {component}",
        "MD5Sum:",
        *(f" {sums[f][0][0]} {sums[f][1]} {f}" for f in files),
        "SHA256:",
        *(f" {sums[f][0][1]} {sums[f][1]} {f}" for f in files),
    ]
    (dist / "Release").write_text("\n".join(release) + "\n")


class _Handler(SimpleHTTPRequestHandler):
    def log_request(self, code="-", size="-"):  # record instead of printing
        status = str(getattr(code, "value", code))
        self.server.requests.append((self.command, unquote(self.path), status))

    def log_message(self, fmt, *args):
        pass


class AptMirror:
    """A started-on-demand HTTP mirror of `debs` on 127.0.0.1 (a context manager)."""

    def __init__(self, debs, codename: str | None = None, component="main", arch="amd64"):
        self.debs = [Path(d) for d in debs]
        self.codename = codename or host_codename()
        self.component, self.arch = component, arch
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._requests: list[tuple[str, str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/debian"

    @property
    def source_line(self) -> str:
        """The one-line apt source naming this mirror."""
        return f"deb [trusted=yes] {self.url} {self.codename} {self.component}"

    @property
    def requests(self) -> list[tuple[str, str, str]]:
        """(method, path, status) of every request served, in order."""
        return list(self._requests)

    def downloads(self) -> list[str]:
        return [
            p.rsplit("/", 1)[-1]
            for m, p, s in self.requests
            if m == "GET" and p.endswith(".deb") and s == "200"
        ]

    def start(self) -> AptMirror:
        self._tmp = tempfile.TemporaryDirectory(prefix="pve-sim-apt-")
        root = Path(self._tmp.name)
        build_tree(root / "debian", self.debs, self.codename, self.component, self.arch)
        handler = partial(_Handler, directory=str(root))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._server.requests = self._requests
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Idempotent: stops serving, closes the socket, removes the tree."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
