"""A site whose package mirror has an internal CA and is reached only through its proxy (issue 21
item 2): a loopback index served over TLS with a private CA (sim/tls.py), answering only the
proxy's source address, and a loopback CONNECT proxy (sim/proxy.py). Without ``index_ca_bundle``
or without ``https_proxy`` the deploy fails with one line naming the index and the fix; with both
it converges, the torch wheel reaching the container through the proxy."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.index import PackageIndex
from sim.proxy import ConnectProxy
from sim.tls import private_ca


@pytest.fixture
def proxy():
    with ConnectProxy(host="127.0.0.1", source="127.0.0.3") as p:
        yield p


@pytest.fixture
def ca_files(tmp_path):
    return private_ca(tmp_path, "127.0.0.2")


@pytest.fixture
def package_index(wheelhouse, ca_files, proxy):
    """The site's mirror: HTTPS with the private CA, answering the proxy alone."""
    _, cert, key = ca_files
    index = PackageIndex(
        wheelhouse.torch_index(),
        wheelhouse.pypi(),
        host="127.0.0.2",
        tls=(cert, key),
        only_from=proxy.source,
    )
    index.start()
    try:
        yield index
    finally:
        index.stop()


def test_a_mirror_with_an_internal_ca_behind_a_proxy(site, ca_files, proxy):
    ca = ca_files[0]
    url = site.index.package_index_url
    # the proxy but not the CA: the container cannot trust the mirror
    run = site.deploy(f"https_proxy={proxy.url}")
    assert run.rc != 0, run.output[-3000:]
    line = next(x for x in run.output.splitlines() if "is not reachable" in x)
    assert f"package_index_url={url} is not reachable from the container for uv==" in line
    assert "CERTIFICATE_VERIFY_FAILED" in line and line.endswith(
        "fix package_index_url (or https_proxy, index_ca_bundle) or start the mirror; the live "
        "venv is untouched"
    ), line
    assert "Traceback" not in run.output
    # the CA but not the proxy: the mirror is not reachable directly
    run = site.deploy(f"index_ca_bundle={ca}")
    assert run.rc != 0, run.output[-3000:]
    line = next(x for x in run.output.splitlines() if "is not reachable" in x)
    assert f"package_index_url={url} is not reachable from the container for uv==" in line
    assert "CERTIFICATE_VERIFY_FAILED" not in line and "Traceback" not in run.output
    site.index.clear_requests()
    proxy.targets.clear()
    run = site.deploy(f"index_ca_bundle={ca}", f"https_proxy={proxy.url}")
    assert run.rc == 0, run.output[-4000:]
    assert any("torch-2.11.0+cu130" in f for f in site.index.downloads()), site.index.downloads()
    assert proxy.targets and set(proxy.targets) == {url.split("/")[2]}
    # the container holds the bundle; uv there got it and the proxy explicitly
    assert site.ct("cat", "/etc/pvegpu/index-ca.pem").stdout == Path(ca).read_text()
    again = site.deploy(f"index_ca_bundle={ca}", f"https_proxy={proxy.url}")
    assert again.rc == 0 and again.changed == 0, again.output[-3000:]
