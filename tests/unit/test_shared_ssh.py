"""pvegpu.connectors.shared_ssh without a node: what counts as a connection to share."""

from __future__ import annotations

from types import SimpleNamespace

from pvegpu.connectors.shared_ssh import ConnectOnce


class Transport:
    def __init__(self, active: bool, authenticated: bool):
        self.active, self.authenticated = active, authenticated

    def is_active(self):
        return self.active

    def is_authenticated(self):
        return self.authenticated


def guard_with(transport):
    client = None if transport is None else SimpleNamespace(get_transport=lambda: transport)
    connects = []
    connector = SimpleNamespace(client=client, connect=lambda: connects.append(1))
    return ConnectOnce(connector), connects  # type: ignore[arg-type]


def test_a_refused_host_key_leaves_nothing_to_share():
    # paramiko keeps the transport of a refused host key active, but it never authenticates.
    guard, connects = guard_with(Transport(active=True, authenticated=False))
    assert not guard.connected()
    guard()
    assert connects == [1]


def test_a_live_authenticated_connection_is_shared_without_a_second_handshake():
    guard, connects = guard_with(Transport(active=True, authenticated=True))
    assert guard.connected()
    guard()
    assert connects == []
    assert not guard_with(None)[0].connected()
    assert not guard_with(Transport(active=False, authenticated=True))[0].connected()
