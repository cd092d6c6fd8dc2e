"""How uv reaches an index, for pvegpu's own HTTP calls: which hosts bypass the proxy (uv reads
``NO_PROXY`` with names, their subdomains, addresses, CIDR blocks and ``*``) and which roots it
trusts (``SSL_CERT_FILE`` alone when set: uv replaces its roots with it, where OpenSSL's defaults,
which urllib loads, would add the system's certificate directory). Plain Python, stdlib only:
pvegpu.facts.probe sends this file in front of a container-side probe that calls
``site_urlopen`` (the uv install, the reach check), as it sends the delete guard.

>>> bypasses_proxy("127.0.0.1:3141", "localhost,10.0.0.0/8,127.0.0.0/16")
True
"""

import ipaddress
import os
import ssl
import urllib.request


def bypasses_proxy(host, no_proxy):
    """Whether ``host`` (``name[:port]``, ``[v6]:port``) is reached directly under ``no_proxy``,
    as uv reads NO_PROXY: ``*``, a name with its subdomains (``.lan`` or ``lan``), an address,
    or a CIDR block.

    >>> [bypasses_proxy(h, "localhost,.lan,127.0.0.0/16") for h in
    ...  ("localhost:8080", "mirror.lan", "127.0.1.3:3141", "pypi.org", "127.1.0.1", "xlan")]
    [True, True, True, False, False, False]
    >>> bypasses_proxy("[::1]:8080", "::1/128"), bypasses_proxy("a.b", "*")
    (True, True)
    >>> bypasses_proxy("a", None)
    False
    """
    if host.startswith("["):  # [v6] or [v6]:port
        name = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:  # a name and a port (a bare v6 address has more colons)
        name = host.rsplit(":", 1)[0]
    else:
        name = host
    name = name.lower().rstrip(".")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        address = None
    for entry in (e.strip().lower() for e in (no_proxy or "").split(",")):
        if entry == "*":
            return True
        if address is not None and entry:
            try:
                if address in ipaddress.ip_network(entry.strip("[]"), strict=False):
                    return True
            except ValueError:
                pass
            continue
        domain = entry.lstrip(".")
        if domain and (name == domain or name.endswith("." + domain)):
            return True
    return False


def tls_context(cafile=None):
    """The roots uv trusts: ``cafile`` alone when given (its ``SSL_CERT_FILE``), else the
    system's defaults (uv's own are Mozilla's, which the system's hold too).

    >>> tls_context().verify_mode == ssl.CERT_REQUIRED
    True
    """
    return ssl.create_default_context(cafile=cafile or None)


def uv_opener(proxies, no_proxy, cafile=None):
    """A urllib opener that goes through ``proxies`` ({"http": url, "https": url}) except for
    the hosts ``no_proxy`` names (uv's rules: urllib's own ProxyHandler asks only this process's
    environment, with name matching alone), and trusts what uv trusts (``tls_context``)."""

    class UvProxyHandler(urllib.request.ProxyHandler):
        def proxy_open(self, req, proxy, type):
            if req.host and bypasses_proxy(req.host, no_proxy):
                return None
            return super().proxy_open(req, proxy, type)

    return urllib.request.build_opener(
        UvProxyHandler({k: v for k, v in proxies.items() if k in ("http", "https") and v}),
        urllib.request.HTTPSHandler(context=tls_context(cafile)),
    )


def env_opener(environ=None):
    """``uv_opener`` from an environment as uv reads it: ``HTTPS_PROXY``/``HTTP_PROXY`` (either
    case; ``ALL_PROXY`` for both), ``NO_PROXY``, ``SSL_CERT_FILE``."""
    env = os.environ if environ is None else environ

    def get(name):
        return env.get(name.upper()) or env.get(name.lower())

    proxies = {
        "http": get("http_proxy") or get("all_proxy"),
        "https": get("https_proxy") or get("all_proxy"),
    }
    return uv_opener(proxies, get("no_proxy"), env.get("SSL_CERT_FILE"))


def site_urlopen(request, timeout):
    """``urllib.request.urlopen`` with uv's proxy and CA rules, from this process's
    environment (what pvegpu passes to uv in the container)."""
    return env_opener().open(request, timeout=timeout)
