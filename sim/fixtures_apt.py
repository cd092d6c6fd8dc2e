"""pytest fixtures for the loopback Debian mirror (sim/aptrepo.py).

- ``kmod_deb`` (session): the real kmod .deb of this machine's Debian, downloaded once with
  `apt-get download` into ``$PVE_SIM_DEB_CACHE`` or ``~/.cache/pvegpu-sim/debs``.
- ``kmod_mirror`` (function): a started ``AptMirror`` serving it on 127.0.0.1; always stopped.
- ``toolchain_mirror`` (function): the same for the Debian 12 tree's C compiler and Python
  headers (gcc, libpython3.11-dev and what only they need: ``aptrepo.ensure_toolchain_debs``).
"""

from __future__ import annotations

import shutil

import pytest

from sim.aptrepo import AptMirror, ensure_deb, ensure_toolchain_debs


@pytest.fixture(scope="session")
def kmod_deb():
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("the loopback Debian mirror needs Debian's apt-get and dpkg-deb")
    return ensure_deb("kmod")


@pytest.fixture
def kmod_mirror(kmod_deb):
    mirror = AptMirror([kmod_deb])
    mirror.start()
    try:
        yield mirror
    finally:
        mirror.stop()


@pytest.fixture(scope="session")
def toolchain_debs():
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("the loopback Debian mirror needs Debian's apt-get and dpkg-deb")
    from sim.rootfs import ensure_tree

    return ensure_toolchain_debs(ensure_tree("bookworm"))


@pytest.fixture
def toolchain_mirror(toolchain_debs):
    mirror = AptMirror(toolchain_debs)
    mirror.start()
    try:
        yield mirror
    finally:
        mirror.stop()
