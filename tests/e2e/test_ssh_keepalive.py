"""SSH keepalive on the node connections (issue 21 item 5): the node host's connection (which the
container hosts share), a container host's own connection, and the deploy lock's channel, idle
for a whole run, all send keepalives every ``ssh_keepalive_s`` seconds (paramiko's
Transport.set_keepalive; pyinfra sets one only from ssh_config's ServerAliveInterval)."""

from __future__ import annotations

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all

from pvegpu.startup import node_lock
from sim.fixtures import shared_sim_node  # noqa: F401


@pytest.fixture(scope="module")
def node(shared_sim_node):  # noqa: F811  (pytest passes the fixture imported above)
    n = shared_sim_node
    create = n.run(
        [
            "pct",
            "create",
            "200",
            "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            "--hostname",
            "t",
            "--unprivileged",
            "0",
            "--rootfs",
            "local-lvm:4",
        ]
    )
    assert create.returncode == 0, create.stderr
    return n


def connect(node, names, **extra):
    data = {
        "ssh_port": node.port,
        "ssh_user": "root",
        "ssh_key": node.key_path,
        "ssh_known_hosts_file": node.known_hosts_path,
        **extra,
    }
    inventory = Inventory(([(name, dict(data)) for name in names], {}))
    state = State(inventory, Config())
    connect_all(state)
    return [inventory.get_host(name) for name in names]


def interval(client) -> int:
    """The keepalive interval paramiko's transport runs with (0: none)."""
    return client.get_transport().packetizer._Packetizer__keepalive_interval


def test_node_and_container_connections_send_keepalives(node):
    node_host, ct_host = connect(node, ["127.0.0.1", "@pct/127.0.0.1/200"], ssh_keepalive_s=7)
    try:
        assert ct_host.connector.ssh.client is node_host.connector.client  # shared
        assert interval(node_host.connector.client) == 7
    finally:
        ct_host.disconnect()
        node_host.disconnect()
    (alone,) = connect(node, ["@pct/127.0.0.1/200"], ssh_keepalive_s=11)
    try:
        assert not alone.connector.shares_node and interval(alone.connector.ssh.client) == 11
    finally:
        alone.disconnect()


def test_the_deploy_locks_channel_rides_a_connection_with_keepalives(node):
    (node_host,) = connect(node, ["127.0.0.1"], ssh_keepalive_s=13)
    try:
        assert interval(node_host.connector.client) == 0  # a node alone: the lock sets it
        channel, problem = node_lock.acquire(node_host, 5)
        assert problem is None
        assert interval(node_host.connector.client) == 13
        assert channel.get_transport() is node_host.connector.client.get_transport()
        channel.close()
    finally:
        node_host.disconnect()
