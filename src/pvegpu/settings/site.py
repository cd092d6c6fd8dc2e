"""What a real site needs beyond the defaults: the free-space floor on the container's root disk,
SSH keepalive on the node connections, and the proxy and CA bundle the indexes are reached with.

>>> for line in SiteSettings(-1, 0, "proxy:3128", None, None, None).problems(): print(line)
min_free_gib=-1 must be >= 0: the GiB the container's root disk must have free for a build
ssh_keepalive_s=0 must be 1..3600: seconds between SSH keepalives on the node connections
http_proxy='proxy:3128' is not a proxy URL: write http://host:port (e.g. http://10.0.0.1:3128)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .kinds import Part, integer, optional_text, setting

#: A proxy URL as uv (reqwest) and Python's urllib take it: http(s)://[user:pass@]host[:port][/]
PROXY_RE = re.compile(r"^https?://[^\s/'\"\\]+/?$")
#: no_proxy: comma-separated host names, domains (.example.com), addresses, CIDRs, or *
NO_PROXY_RE = re.compile(r"^[A-Za-z0-9.*:/\[\]_-]+(,[A-Za-z0-9.*:/\[\]_-]+)*$")


@dataclass(frozen=True)
class SiteSettings(Part):
    """``min_free_gib``, ``ssh_keepalive_s``, ``http_proxy``, ``https_proxy``, ``no_proxy`` and
    ``index_ca_bundle`` (group_data/all.py, "site")."""

    min_free_gib: int = setting("min_free_gib", integer)
    ssh_keepalive_s: int = setting("ssh_keepalive_s", integer)
    http_proxy: str | None = setting("http_proxy", optional_text, strict=True)
    https_proxy: str | None = setting("https_proxy", optional_text, strict=True)
    no_proxy: str | None = setting("no_proxy", optional_text, strict=True)
    index_ca_bundle: str | None = setting("index_ca_bundle", optional_text, strict=True)

    def problems(self) -> list[str]:
        errs = self.field_problems()
        if self.min_free_gib < 0:
            errs.append(
                f"min_free_gib={self.min_free_gib} must be >= 0: the GiB the container's root "
                "disk must have free for a build"
            )
        if not 1 <= self.ssh_keepalive_s <= 3600:
            errs.append(
                f"ssh_keepalive_s={self.ssh_keepalive_s} must be 1..3600: seconds between SSH "
                "keepalives on the node connections"
            )
        for key, value in (("http_proxy", self.http_proxy), ("https_proxy", self.https_proxy)):
            if value is not None and not PROXY_RE.match(value):
                errs.append(
                    f"{key}={value!r} is not a proxy URL: write http://host:port "
                    "(e.g. http://10.0.0.1:3128)"
                )
        if self.no_proxy is not None and not NO_PROXY_RE.match(self.no_proxy):
            errs.append(
                f"no_proxy={self.no_proxy!r} is not a comma-separated list of hosts, domains "
                "or addresses: e.g. no_proxy=localhost,.internal.example,10.0.0.0/8"
            )
        if self.index_ca_bundle is not None and not ca_bundle_ok(self.index_ca_bundle):
            errs.append(
                f"index_ca_bundle={self.index_ca_bundle!r} is not a readable PEM certificate "
                "bundle on this machine: give the path of the CA file (-----BEGIN "
                "CERTIFICATE-----) the indexes' certificates chain to"
            )
        return errs

    def proxy_env(self) -> dict[str, str]:
        """The proxy variables to set (both spellings: uv reads the upper-case ones, Python's
        urllib either), only those configured.

        >>> SiteSettings(20, 30, None, "http://p:3128", "10.0.0.0/8", None).proxy_env()
        ... # doctest: +NORMALIZE_WHITESPACE
        {'https_proxy': 'http://p:3128', 'HTTPS_PROXY': 'http://p:3128', 'no_proxy': '10.0.0.0/8',
         'NO_PROXY': '10.0.0.0/8'}
        """
        env: dict[str, str] = {}
        for key, value in (
            ("http_proxy", self.http_proxy),
            ("https_proxy", self.https_proxy),
            ("no_proxy", self.no_proxy),
        ):
            if value is not None:
                env[key] = env[key.upper()] = value
        return env


def ca_bundle_ok(path: str) -> bool:
    """Whether ``path`` is a readable file holding at least one PEM certificate."""
    try:
        return "-----BEGIN CERTIFICATE-----" in Path(path).read_text(errors="replace")
    except OSError:
        return False
