"""Proxies and the index CA reach every network call in the container explicitly (issue 21 item
2): `pct exec` starts from an empty environment, so uv and pvegpu's own index checks get them on
their command lines (pvegpu.plan.uv_commands.site_env)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pvegpu.locks.credentials import site_opener
from pvegpu.plan.uv_commands import CA_BUNDLE, reach_command, uv_env
from pvegpu.settings import Settings, SettingsError, defaults
from sim.tls import private_ca
from tests.unit.mutmut_state import instrumented_by_mutmut


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
    assert "PROXY" not in uv_env(plain) and "SSL_CERT_FILE=" not in reach_command(plain)


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


def container_reach(env: dict, *urls: str):
    """The container-side reach check (the probe's source, as `reach_command` sends it) run here
    with only ``env`` (and PATH): (exit status, stderr)."""
    from pvegpu.facts.probe import probe_source

    args = [f"{k}={u}" for k, u in zip(("package_index_url", "torch_index_base"), urls)]
    import subprocess

    run = subprocess.run(
        ["python3", "-c", probe_source("reach_indexes"), *args],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return run.returncode, run.stderr


@pytest.mark.skipif(instrumented_by_mutmut(), reason="sources instrumented by mutmut")
@pytest.mark.parametrize("no_proxy", ["127.0.0.0/8", "localhost,127.0.0.1/32", "*"])
def test_the_container_side_checks_read_no_proxy_as_uv_does(loopback_index, no_proxy):
    """uv reads NO_PROXY with CIDR blocks; urllib's own bypass matches names only, so a CIDR
    entry would send the container's reach check (and the uv install) to a proxy uv never uses."""
    index, closed = loopback_index
    proxy = f"http://127.0.0.1:{closed}"
    env = {"http_proxy": proxy, "HTTP_PROXY": proxy, "no_proxy": no_proxy, "NO_PROXY": no_proxy}
    assert container_reach(env, index + "/simple", index + "/whl") == (0, "")
    rc, err = container_reach(
        {**env, "no_proxy": "127.0.0.2/32", "NO_PROXY": "127.0.0.2/32"},
        index + "/simple",
        index + "/whl",
    )
    assert rc == 1 and "is not reachable from the container" in err


def test_the_container_side_checks_trust_only_the_bundle_uv_trusts(tmp_path):
    """uv takes SSL_CERT_FILE as its only roots; OpenSSL's defaults, which urllib loads, add the
    system's certificate directory (SSL_CERT_DIR). A mirror whose CA is only in the system store
    must fail the container's check exactly as it fails uv."""
    import subprocess

    from sim.index import PackageIndex

    (tmp_path / "mirror").mkdir()
    (tmp_path / "other").mkdir()
    mirror_ca, cert, key = private_ca(tmp_path / "mirror", "127.0.0.1")
    other_ca, _, _ = private_ca(tmp_path / "other", "127.0.0.1", "another private CA")
    system = tmp_path / "system-certs"  # the mirror's CA as a system root (hashed name)
    system.mkdir()
    digest = subprocess.run(
        ["openssl", "x509", "-hash", "-noout", "-in", mirror_ca],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (system / f"{digest}.0").write_text(Path(mirror_ca).read_text())
    index = PackageIndex(tls=(cert, key)).start()
    try:
        url = index.url + "/simple"
        trusted = container_reach(
            {"SSL_CERT_FILE": mirror_ca, "SSL_CERT_DIR": "/nonexistent"}, url, url
        )
        assert trusted == (0, "")
        rc, err = container_reach(
            {"SSL_CERT_FILE": other_ca, "SSL_CERT_DIR": str(system)}, url, url
        )
        assert rc == 1 and "CERTIFICATE_VERIFY_FAILED" in err, err
    finally:
        index.stop()
