# Not a fact probe: the container-side check that the package and torch indexes answer, run by
# pvegpu.plan.uv_commands.reach_command as `python3 -c <this file> key=url ...` before an online
# sync.
# The URLs carry no credentials: those come from $NETRC (as for uv), so no token is in an argv or
# part of a host name to resolve. Proxies and trusted roots follow uv's rules (site_urlopen,
# pvegpu/netrules.py, sent in front): what passes here, uv reaches. On failure it prints one line
# "pvegpu: ..." and exits 1.
import base64
import netrc
import os
import sys
import urllib.parse as p
import urllib.request as u

for arg in sys.argv[1:]:
    key, _, url = arg.partition("=")
    req = u.Request(url.rstrip("/") + "/", method="HEAD")
    try:
        host = p.urlsplit(url).hostname
        auth = netrc.netrc(os.environ["NETRC"]).authenticators(host)  # type: ignore[arg-type]
    except (KeyError, OSError, netrc.NetrcParseError):
        auth = None
    if auth:
        tok = base64.b64encode(f"{auth[0]}:{auth[2]}".encode()).decode()
        req.add_header("Authorization", "Basic " + tok)
    try:
        site_urlopen(req, timeout=20).close()  # noqa: F821 (pvegpu/netrules.py, sent in front)
    except u.HTTPError as e:
        if e.code in (401, 403):
            print(
                f"pvegpu: {key}={url} refused the credentials (HTTP {e.code}): "
                f"fix the user:token in {key}",
                file=sys.stderr,
            )
            sys.exit(1)
    except Exception as e:
        r = getattr(e, "reason", e)
        print(
            f"pvegpu: {key}={url} is not reachable from the container ({r}): "
            f"fix {key} (or https_proxy, no_proxy, index_ca_bundle: uv trusts only that "
            "bundle when it is set) or start the index/mirror",
            file=sys.stderr,
        )
        sys.exit(1)
