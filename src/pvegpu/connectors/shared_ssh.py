"""One SSH connection per node and run: a ``@pct`` host rides on its node host's connection.

Every container command travels over SSH to the node anyway, so when the inventory also holds the
node host (``pve_hosts``) with the same effective SSH data (address, port, user, key, known_hosts,
...), the container host uses that host's paramiko client instead of a second handshake. The
connection is the node's, opened and host-key checked with exactly the data the container host
would have used, so host-key checking stays as strict.

pyinfra connects all hosts side by side (``pyinfra.api.connect.connect_all``: one greenlet per
host, ``Host.connect`` calls ``connector.connect()``), so the node's connector gets a guard that
makes its handshake happen once: the first caller connects, a concurrent one waits for it, later
ones reuse the client or re-raise its error. The guard is put on before the node host connects
(a ``host_before_connect`` callback) or when a container host asks first.

sshd allows ``MaxSessions`` (default 10) channels at once on one connection; the node host itself
keeps up to three open (the deploy lock, a command, SFTP), so at most :data:`MAX_SHARERS`
container hosts share one node connection; any further ones open their own, as before.

>>> effective({"ssh_hostname": None, "ssh_port": 22}, "10.1.2.6")
{'ssh_hostname': '10.1.2.6', 'ssh_port': 22}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gevent.lock import Semaphore
from pyinfra.api.exceptions import ConnectError
from pyinfra.api.state import BaseStateCallback
from pyinfra.connectors.ssh import SSHConnector

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.state import State

#: Container hosts sharing one node connection, at most: 3 node channels + 6 <= MaxSessions 10.
MAX_SHARERS = 6


def keepalive_seconds(data: Any) -> int | None:
    """``ssh_keepalive_s`` of host data when valid (1..3600), else None (the settings check
    refuses the run then; a connection is made before it runs).

    >>> keepalive_seconds({"ssh_keepalive_s": 30}), keepalive_seconds({"ssh_keepalive_s": "x"})
    (30, None)
    """
    value = data.get("ssh_keepalive_s") if data is not None else None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 3600:
        return None
    return value


def keep_alive(client: Any, data: Any) -> None:
    """Send an SSH keepalive after every ``ssh_keepalive_s`` idle seconds on ``client``'s
    connection (paramiko's ``Transport.set_keepalive``; pyinfra sets one only from ssh_config's
    ServerAliveInterval), so a NAT or firewall idle timeout does not drop it: the deploy lock's
    channel is idle for the whole run."""
    seconds = keepalive_seconds(data)
    transport = client.get_transport() if client is not None else None
    if seconds is not None and transport is not None:
        transport.set_keepalive(seconds)


def effective(data: dict, host_name: str) -> dict:
    """SSH connector data as it connects: no ``ssh_hostname`` means the host's own name."""
    return {**data, "ssh_hostname": data.get("ssh_hostname") or host_name}


class ConnectOnce:
    """A node connector's ``connect`` that shakes hands once, however many hosts ask for it."""

    def __init__(self, connector: SSHConnector):
        self.connector = connector
        self.connect_now = connector.connect  # pyinfra's own, bound
        self.lock = Semaphore()
        self.error: ConnectError | None = None
        self.sharers = 0

    def connected(self) -> bool:
        """Whether the node's client has a live, authenticated transport. Authenticated too: a
        refused host key leaves paramiko's transport active but never authenticated."""
        client = self.connector.client
        transport = client.get_transport() if client is not None else None
        return transport is not None and transport.is_active() and transport.is_authenticated()

    def __call__(self) -> None:
        # A gevent lock: connect_all runs each host's connect in its own greenlet.
        with self.lock:
            if self.error is not None:
                raise self.error
            if self.connected():
                return
            try:
                self.connect_now()
            except ConnectError as e:
                self.error = e  # the other hosts fail with it, not with a second handshake
                raise
            keep_alive(
                self.connector.client, getattr(getattr(self.connector, "host", None), "data", None)
            )


def connect_once(connector: SSHConnector) -> ConnectOnce:
    """The connector's guard, put on the first time (an instance attribute over the method: what
    ``Host.connect`` calls)."""
    guard = connector.__dict__.get("connect")
    if not isinstance(guard, ConnectOnce):
        guard = ConnectOnce(connector)
        setattr(connector, "connect", guard)  # noqa: B010 (mypy refuses assigning to a method)
    return guard


class GuardNodeConnects(BaseStateCallback):
    """Puts the guard on a shared node's connector before pyinfra connects that node host."""

    def __init__(self) -> None:
        self.nodes: set[str] = set()

    def host_before_connect(self, state: State, host: Host) -> None:  # type: ignore[override]
        connector = getattr(host, "connector", None)
        if host.name in self.nodes and type(connector) is SSHConnector:
            connect_once(connector)


def announce_node(state: State, node_name: str) -> None:
    """Note, while hosts are set up, that a container host may share ``node_name``'s connection."""
    handlers = getattr(state, "callback_handlers", None)
    if handlers is None:
        return
    guard = next((h for h in handlers if isinstance(h, GuardNodeConnects)), None)
    if guard is None:
        guard = GuardNodeConnects()
        state.add_callback_handler(guard)
    guard.nodes.add(node_name)


def node_connector(state: State, host: Host, own: SSHConnector) -> SSHConnector | None:
    """The node host's SSH connector when ``host`` (a ``@pct`` host) may share its connection:
    the node host is in the inventory, connects with pyinfra's SSH connector and with the same
    effective SSH data as ``own`` would. None: connect on its own."""
    inventory = getattr(state, "inventory", None)
    node_name = host.data.get("pct_node")
    if inventory is None or not node_name or not hasattr(inventory, "get_host"):
        return None
    node_host = inventory.get_host(node_name, None)
    connector: Any = getattr(node_host, "connector", None)
    if node_host is None or node_host is host or type(connector) is not SSHConnector:
        return None
    if effective(dict(connector.data), node_host.name) != effective(dict(own.data), node_name):
        return None
    return connector


def connect_shared(state: State, host: Host, own: SSHConnector) -> bool:
    """Give ``own`` the node host's client, connecting it (once) if need be; False when there is
    no node connection to share (``own`` must connect itself). Raises the node's ConnectError."""
    node = node_connector(state, host, own)
    if node is None:
        return False
    guard = connect_once(node)
    if guard.sharers >= MAX_SHARERS:
        return False
    guard.sharers += 1
    guard()
    own.client = node.client
    return True
