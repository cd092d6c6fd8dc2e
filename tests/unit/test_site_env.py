"""Proxies and the index CA reach every network call in the container explicitly (issue 21 item
2): `pct exec` starts from an empty environment, so uv and pvegpu's own index checks get them on
their command lines (pvegpu.plan.uv_commands.site_env)."""

from __future__ import annotations

import pytest

from pvegpu.locks.credentials import site_opener
from pvegpu.plan.uv_commands import CA_BUNDLE, reach_command, uv_env
from pvegpu.settings import Settings, SettingsError, defaults
from sim.tls import private_ca


def settings(tmp_path, **over):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    return Settings.from_data(
        {
            **defaults(),
            "index_ca_bundle": str(ca),
            "https_proxy": "http://127.0.0.91:3128",
            "no_proxy": "localhost",
            **over,
        }
    )


def test_uv_and_the_reach_check_get_the_proxy_and_the_ca_bundle(tmp_path):
    s = settings(tmp_path)
    for text in (uv_env(s), reach_command(s)):
        assert "https_proxy=http://127.0.0.91:3128 HTTPS_PROXY=http://127.0.0.91:3128" in text
        assert "no_proxy=localhost NO_PROXY=localhost" in text
        assert f"SSL_CERT_FILE={CA_BUNDLE}" in text
    plain = Settings.from_data(defaults())
    assert "PROXY" not in uv_env(plain) and "SSL_CERT_FILE" not in reach_command(plain)


def test_bad_proxy_and_ca_values_are_refused_with_the_fix(tmp_path):
    with pytest.raises(SettingsError) as e:
        settings(
            tmp_path,
            http_proxy="127.0.0.91:3128",
            index_ca_bundle=str(tmp_path / "nope.pem"),
            no_proxy="a b",
        )
    lines = str(e.value).splitlines()
    assert lines[0].startswith("http_proxy='127.0.0.91:3128' is not a proxy URL: write http://")
    assert lines[1].startswith("no_proxy='a b' is not a comma-separated list")
    assert lines[2].startswith(f"index_ca_bundle='{tmp_path}/nope.pem' is not a readable PEM")


def test_the_controllers_index_check_uses_the_site_proxy(tmp_path):
    (tmp_path / "real").mkdir()
    ca, _, _ = private_ca(tmp_path / "real", "127.0.0.2")
    s = settings(tmp_path, http_proxy="http://127.0.0.92:8080", index_ca_bundle=ca)
    import urllib.request

    (proxy,) = [h for h in site_opener(s).handlers if isinstance(h, urllib.request.ProxyHandler)]
    assert proxy.proxies["https"] == "http://127.0.0.91:3128"
    assert proxy.proxies["http"] == "http://127.0.0.92:8080"


def test_a_bundle_that_is_no_ca_file_is_one_line_not_a_traceback(tmp_path):
    from pvegpu.locks.credentials import index_problem

    line = index_problem(settings(tmp_path))
    assert line.startswith(f"index_ca_bundle='{tmp_path}/ca.pem' cannot be loaded (")


@pytest.fixture
def loopback_index():
    """A loopback HTTP server that answers every request 200 (the index), and a loopback port
    nothing listens on (a proxy that is down); the server stopped after the test."""
    import http.server
    import socket
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", closed
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "127.0.0.0/8", "localhost,.lan,127.0.0.1", "*"])
def test_the_controllers_index_check_reaches_a_no_proxy_index_directly(
    tmp_path, loopback_index, no_proxy, monkeypatch
):
    """urllib's ProxyHandler asks only the environment which hosts bypass the proxy: the site's
    no_proxy (names, addresses, CIDRs, *) must keep the controller's check off a proxy that is
    down, as it keeps uv off it."""
    from pvegpu.locks.credentials import index_problem

    for key in ("no_proxy", "NO_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(key, raising=False)
    index, closed = loopback_index
    over = {
        "package_index_url": index + "/simple",
        "torch_index_base": index + "/whl",
        "index_ca_bundle": None,
        "http_proxy": f"http://127.0.0.1:{closed}",
    }
    assert index_problem(settings(tmp_path, **over, no_proxy=no_proxy)) is None
    through_proxy = index_problem(settings(tmp_path, **over, no_proxy="localhost,127.0.0.2/32"))
    assert through_proxy.startswith("package_index_url=") and "not reachable" in through_proxy
