"""pytest fixtures for the simulated Proxmox node. Import them into a conftest.py:

    from sim.fixtures import sim_node, shared_sim_node  # noqa: F401

`sim_node` is a factory: `node = sim_node(gpus=4, pve_version="8.1.4")` starts a node; every node
it started is stopped (processes killed, namespace gone, state removed) when the test ends, pass or
fail. `shared_sim_node` is one default node per test module, for tests that only read or that clean
up after themselves.
"""

import os
import shutil

import pytest

from sim.node import SimNode, cgroup_hierarchies


def _check_host():
    if os.geteuid() != 0:
        pytest.skip("the simulated node needs root (namespaces, overlayfs, mknod)")
    for tool in ("unshare", "nsenter", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            pytest.skip(f"the simulated node needs {tool}")
    if not os.path.exists("/usr/sbin/sshd"):
        pytest.skip("the simulated node needs Debian's openssh-server (/usr/sbin/sshd)")


def skip_without_real_systemd():
    """Skip (with the reason) where containers cannot boot real systemd (ct_init="systemd")."""
    _check_host()
    if shutil.which("systemd-nspawn") is None:
        pytest.skip(
            "real-systemd containers need systemd-nspawn (apt-get install systemd-container)"
        )
    if not cgroup_hierarchies():
        pytest.skip("real-systemd containers need cgroup v2 or the hybrid cgroup layout")


def check_host(ct_init=None):
    """Skip (with the reason) where a SimNode(ct_init=...) cannot run; None: SimNode's default
    ($PVE_SIM_CT_INIT, else real systemd)."""
    if (ct_init or os.environ.get("PVE_SIM_CT_INIT") or "systemd") == "systemd":
        skip_without_real_systemd()
    else:
        _check_host()


def _factory(tmp_path_factory):
    nodes = []

    def make(**settings) -> SimNode:
        check_host(settings.get("ct_init"))
        state = tmp_path_factory.mktemp("pve-sim") / "node"
        node = SimNode(state, **settings)
        nodes.append(node)
        node.start()
        return node

    def finish():
        errors = []
        for node in reversed(nodes):
            try:
                node.stop()
            except Exception as e:  # keep stopping the others
                errors.append(e)
        if errors:
            raise errors[0]

    return make, finish


@pytest.fixture
def sim_node(tmp_path_factory):
    make, finish = _factory(tmp_path_factory)
    try:
        yield make
    finally:
        finish()


@pytest.fixture(scope="module")
def shared_sim_node(tmp_path_factory):
    make, finish = _factory(tmp_path_factory)
    try:
        yield make()
    finally:
        finish()
