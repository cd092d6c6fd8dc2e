"""Index credentials: never in argv, output or files other than a 0600 netrc.

A ``user:token@`` in ``package_index_url`` or ``torch_index_base`` reaches uv only through a
netrc (:func:`netrc_text`); messages show URLs through :func:`redact`.
"""

from __future__ import annotations

import base64
import re
from urllib.parse import unquote, urlsplit, urlunsplit

from ..netrules import uv_opener
from ..settings import Settings, TorchSettings


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``(url without user:token@, (user, token) or None)``; the token is URL-decoded.

    >>> split_credentials("https://me:s%40cret@mirror.example/simple")
    ('https://mirror.example/simple', ('me', 's@cret'))
    >>> split_credentials("https://pypi.org/simple")
    ('https://pypi.org/simple', None)
    """
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return clean, (unquote(parts.username or ""), unquote(parts.password or ""))


def redact(text: str) -> str:
    """Every ``scheme://user:token@`` in ``text`` with the token replaced by ``***``.

    >>> redact("package_index_url=https://me:tok@mirror.example/simple is down")
    'package_index_url=https://me:***@mirror.example/simple is down'
    """
    return re.sub(r"(\b[a-z][a-z0-9+.-]*://[^/@:\s]*):[^/@\s]*@", r"\1:***@", text, flags=re.I)


def netrc_text(torch: TorchSettings) -> str:
    """A netrc (``machine <host> login <user> password <token>``) for the indexes that carry
    credentials, '' when none does. uv reads it from ``$NETRC``; so does the reachability check.
    netrc is per host: two indexes on one host share its credentials."""
    lines = {}
    for url in (torch.package_index_url, torch.index_url):
        _, cred = split_credentials(url)
        host = urlsplit(url).hostname
        if cred and host and host not in lines:
            lines[host] = f"machine {host} login {cred[0]} password {cred[1]}\n"
    return "".join(lines.values())


def credential_conflict(settings: Settings) -> str | None:
    """One line when the two index URLs carry different credentials for one host (a netrc holds
    one login per host), else None."""
    seen: dict[str, tuple[str, tuple[str, str]]] = {}
    for key in ("package_index_url", "torch_index_base"):
        url = settings.value(key)
        _, cred = split_credentials(url)
        host = urlsplit(url).hostname
        if not cred or not host:
            continue
        if host in seen and seen[host][1] != cred:
            return (
                f"{seen[host][0]} and {key} carry different credentials for {host}: uv reads "
                "one login per host (netrc): give both the same user:token"
            )
        seen[host] = (key, cred)
    return None


def site_opener(settings: Settings):
    """A urllib opener with the site's proxies (``http_proxy``, ``https_proxy``, ``no_proxy``;
    this machine's own environment where they are unset) and ``index_ca_bundle`` as the only CA
    file when set: uv's rules (pvegpu.netrules), so this check passes where uv gets through."""
    import urllib.request

    proxies = urllib.request.getproxies()
    site = settings.site
    for scheme, value in (("http", site.http_proxy), ("https", site.https_proxy)):
        if value:
            proxies[scheme] = value
    no_proxy = site.no_proxy or proxies.get("no")
    return uv_opener(proxies, no_proxy, site.index_ca_bundle)


def index_problem(settings: Settings, urlopen=None) -> str | None:
    """One line when an index does not answer this machine or refuses its credentials (uv
    reports a refused login only as "not found"); None when both answer."""
    # imported here: only making a lock needs them, and every run imports this module
    import urllib.error
    import urllib.request

    if urlopen is None:
        try:
            urlopen = site_opener(settings).open
        except OSError as e:  # ssl.SSLError: not a usable CA bundle
            return (
                f"index_ca_bundle={settings.site.index_ca_bundle!r} cannot be loaded ({e}): "
                "give a PEM bundle of CA certificates"
            )
    for key, url in (
        ("package_index_url", settings.torch.package_index_url),
        ("torch_index_base", settings.torch.index_url),
    ):
        clean, cred = split_credentials(url)
        req = urllib.request.Request(clean.rstrip("/") + "/", method="HEAD")
        if cred:
            token = base64.b64encode(f"{cred[0]}:{cred[1]}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        try:
            urlopen(req, timeout=20).close()
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                return (
                    f"{key}={redact(url)} refused the credentials (HTTP {e.code}): fix the "
                    f"user:token in {key}"
                )
        except Exception as e:  # noqa: BLE001 - any failure is one line
            why = redact(str(getattr(e, "reason", e)))
            return (
                f"{key}={redact(url)} is not reachable from this machine ({why}), where "
                f"locks are made: fix {key} (or https_proxy, index_ca_bundle) or start the index"
            )
    return None
