# Installer (not a probe, same transport): put the pinned uv into its own directory, with the
# container's system python3 and the standard library only (no pip, no ensurepip, no curl | sh).
# ARGS is prepended: {"version": "0.13.9", "index": "<package_index_url>", "home":
# "/opt/pvegpu/uv-0.13.9",
#                     "hashes": {"<wheel file name>": "<sha256>"}, "link": "/usr/local/bin/uv",
#                     "netrc": "<path>" or null}
# The index URL carries no credentials: those are read from the netrc (basic auth), never argv.
# Proxies and trusted roots follow uv's rules (site_urlopen, pvegpu/netrules.py, sent in front).
# It reads <index>/uv/ (PEP 503), picks the wheel of this machine (manylinux for glibc, else
# musllinux) whose sha256 the project's uv.lock pins (or, for a version uv.lock does not know, the
# index's #sha256), checks the download against it, and unpacks uv-<ver>.data/scripts/{uv,uvx}
# into <home>/bin, then switches <link> to it. On failure it prints one line "pvegpu: ..." and
# exits 1; nothing is left half-installed (the new home is renamed into place only when complete).
import base64
import hashlib
import html
import json
import netrc
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)


def die(msg):
    print(f"pvegpu: {msg}", file=sys.stderr)
    sys.exit(1)


def platform_ok(tags):
    machine = os.uname().machine
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        libc = ""
    glibc = (
        tuple(int(x) for x in re.findall(r"\d+", libc)[:2]) if libc.startswith("glibc") else None
    )
    for tag in tags.split("."):
        if not tag.endswith("_" + machine):
            continue
        m = re.match(r"manylinux_(\d+)_(\d+)_", tag)
        if glibc and m and (int(m.group(1)), int(m.group(2))) <= glibc:
            return True
        if glibc and tag.startswith("manylinux2014_") and glibc >= (2, 17):
            return True
        if not glibc and tag.startswith("musllinux_"):
            return True
    return False


def request(url):
    """A GET of url with basic auth from the netrc when it has the url's host."""
    req = urllib.request.Request(url)
    try:
        auth = netrc.netrc(A["netrc"]).authenticators(urllib.parse.urlsplit(url).hostname)
    except (KeyError, TypeError, OSError, netrc.NetrcParseError):
        auth = None
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[2]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    return req


version, index, home = A["version"], A["index"].rstrip("/"), A["home"]
page = f"{index}/uv/"
try:
    with site_urlopen(request(page), timeout=60) as r:  # noqa: F821 (pvegpu/netrules.py)
        body = r.read().decode("utf-8", "replace")
        page = r.geturl()
except Exception as e:  # noqa: BLE001 - any failure is one line
    die(
        f"package_index_url={A['index']} is not reachable from the container for uv=={version} "
        f"({type(e).__name__}: {e}): fix package_index_url (or https_proxy, index_ca_bundle) "
        "or start the mirror"
    )

candidates = []
for href in re.findall(r'<a\s[^>]*href="([^"]+)"', body):
    url = urllib.parse.urljoin(page, html.unescape(href))
    path, _, frag = url.partition("#")
    name = urllib.parse.unquote(path.rsplit("/", 1)[-1])
    m = re.fullmatch(rf"uv-{re.escape(version)}-[^-]+-[^-]+-(.+)\.whl", name)
    if not m or not platform_ok(m.group(1)):
        continue
    index_sha = frag[len("sha256=") :] if frag.startswith("sha256=") else None
    want = A["hashes"].get(name) if A["hashes"] else index_sha
    if want:
        candidates.append((name, path, want, index_sha))
if not candidates:
    die(
        f"no uv=={version} wheel for {os.uname().machine} with a pinned sha256 at {page}: "
        f"put uv=={version} (the version in uv.lock) on the package index"
    )
name, url, want, index_sha = candidates[0]

parent = os.path.dirname(home)
os.makedirs(parent, exist_ok=True)
tmp = tempfile.mkdtemp(prefix=".uv-install-", dir=parent)
try:
    wheel = os.path.join(tmp, name)
    h = hashlib.sha256()
    try:
        with site_urlopen(request(url), timeout=300) as r, open(wheel, "wb") as f:  # noqa: F821
            for chunk in iter(lambda: r.read(1 << 20), b""):
                h.update(chunk)
                f.write(chunk)
    except Exception as e:  # noqa: BLE001
        die(f"downloading {name} from {url} failed ({type(e).__name__}: {e})")
    if h.hexdigest() != want:
        die(
            f"{name} has sha256 {h.hexdigest()}, uv.lock pins {want}: the mirror serves another "
            "file"
        )
    new = os.path.join(tmp, "home")
    os.makedirs(os.path.join(new, "bin"))
    with zipfile.ZipFile(wheel) as z:
        for tool in ("uv", "uvx"):
            member = f"uv-{version}.data/scripts/{tool}"
            try:
                data = z.read(member)
            except KeyError:
                if tool == "uv":
                    die(f"{name} has no {member}")
                continue
            dest = os.path.join(new, "bin", tool)
            with open(dest, "wb") as f:
                f.write(data)
            os.chmod(dest, 0o755)
    got = subprocess.run(
        [os.path.join(new, "bin", "uv"), "--version"], capture_output=True, text=True
    )
    if got.returncode != 0 or got.stdout.split()[1:2] != [version]:
        die(
            f"the unpacked uv does not run or is not {version}: "
            f"{got.stdout.strip()} {got.stderr.strip()}"
        )
    with open(os.path.join(new, "WHEEL-SHA256"), "w") as record:
        record.write(f"{name} {want}\n")
    # The delete guard (pvegpu/guard.py, prepended): only under /opt/pvegpu.
    remove_tree(home)  # noqa: F821
    os.rename(new, home)
finally:
    remove_tree(tmp, ignore_errors=True)  # noqa: F821
link = A.get("link")
if link:
    os.makedirs(os.path.dirname(link), exist_ok=True)
    tmp_link = f"{link}.pvegpu-tmp"
    if os.path.lexists(tmp_link):
        os.unlink(tmp_link)
    os.symlink(os.path.join(home, "bin", "uv"), tmp_link)
    os.replace(tmp_link, link)
print(f"uv {version} installed in {home} from {name}")
