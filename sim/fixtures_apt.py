"""pytest fixtures for the loopback Debian mirror (sim/aptrepo.py).

- ``kmod_deb`` (session): the real kmod .deb of this machine's Debian, downloaded once with
  `apt-get download` into ``$PVE_SIM_DEB_CACHE`` or ``~/.cache/pvegpu-sim/debs``.
- ``kmod_mirror`` (function): a started ``AptMirror`` serving it on 127.0.0.1; always stopped.
"""

from __future__ import annotations

import shutil

import pytest

from sim.aptrepo import AptMirror, ensure_deb


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
