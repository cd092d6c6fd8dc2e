"""Where the fleet comes from: environment variables or a fleet file the user writes.

Never a silent default address: with neither, ``load_fleet`` raises FleetError saying how to
configure a node and how to run the demo instead.

>>> nodes = fleet_from_env({"PVE_HOST": "127.0.0.1", "PVE_SSH_PORT": "2222", "CT_ID": "200"})
>>> nodes[0].address, nodes[0].ssh_port, nodes[0].containers
('127.0.0.1', 2222, (200,))

A fleet file's ``containers:`` entry is a vmid, or a mapping with ``vmid:`` and that container's
own settings (its training GPUs, say), over the node entry's:

>>> container_entry({"vmid": 201, "target_gpus": [4, 5, 6], "drafter_gpus": [7]}, "f node 1")
(201, {'target_gpus': [4, 5, 6], 'drafter_gpus': [7]})
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pyinfra.api.exceptions import InventoryError

from ..refusal import Refused

HOW_TO_CONFIGURE = (
    "no Proxmox node configured: export PVE_HOST=<node address> (and optionally PVE_SSH_PORT, "
    "PVE_SSH_USER, PVE_SSH_KEY, CT_ID), or copy fleet.example.yaml to fleet.yaml and edit it "
    "(PVE_FLEET=<path> points elsewhere); to try pvegpu against a simulated node instead, run "
    "`uv run python -m sim demo`"
)


#: The keys of a fleet file's node entry the fleet itself reads; any other key is per-node data.
NODE_KEYS = ("address", "ssh_port", "ssh_user", "ssh_key", "ssh_known_hosts_file", "containers")
#: The data the fleet gives a node host besides its ssh_* (its containers' vmids).
FLEET_DATA_KEYS = ("pve_ct_ids",)


class FleetError(Refused, InventoryError):
    """The fleet is missing or malformed (one line, printed as it is: :class:`Refused`)."""


@dataclass(frozen=True)
class Node:
    address: str
    ssh_port: int = 22
    ssh_user: str = "root"
    ssh_key: str | None = None
    ssh_known_hosts_file: str | None = None
    containers: tuple[int, ...] = (200,)
    #: pvegpu settings given for this node in the fleet file: data of the node and its containers
    data: Mapping = field(default_factory=dict)
    #: {vmid: settings} given for one container in its ``containers:`` entry (over ``data``)
    container_data: Mapping[int, Mapping] = field(default_factory=dict)

    def ssh_data(self) -> dict:
        data = {"ssh_port": self.ssh_port, "ssh_user": self.ssh_user}
        if self.ssh_key:
            data["ssh_key"] = os.path.expanduser(self.ssh_key)
        if self.ssh_known_hosts_file:
            # A pinned key: checked strictly (a wrong or missing key refuses the connection).
            data["ssh_known_hosts_file"] = os.path.expanduser(self.ssh_known_hosts_file)
            data["ssh_strict_host_key_checking"] = "yes"
        return data


def known_hosts_problem(path: str | None, where: str) -> None:
    """Refuse (FleetError, one line) a known_hosts file that is given but cannot be read."""
    if path and not os.path.isfile(os.path.expanduser(path)):
        raise FleetError(
            f"{where}={path} is not a readable file: point it at the node's pinned known_hosts "
            "(README.md#before-the-first-deploy-on-a-real-node), or unset it to record the key on "
            "first connect"
        )


def record_new_host_keys_once() -> None:
    """Without a pinned known_hosts file, pyinfra accepts a node's first key and appends it to
    ~/.ssh/known_hosts (``accept-new``) but not to its in-memory copy, so every other connection
    of the same run to that node (each container host opens one) appends it again. Record a
    first key once: in memory too, and not again when another connection already did."""
    from pyinfra.connectors.sshuserclient import client as ssh_client

    policy = ssh_client.AcceptNewPolicy
    if getattr(policy, "_pvegpu_once", False):
        return
    append = policy.missing_host_key

    def missing_host_key(self, client, hostname, key):
        with ssh_client.HOST_KEYS_LOCK:
            known = client._host_keys.lookup(hostname) or {}
            if key.get_name() in known:
                if known[key.get_name()] != key:
                    raise ssh_client.SSHException(f"Host key for {hostname} does not match.")
                return  # another connection of this run recorded it a moment ago
            client._host_keys.add(hostname, key.get_name(), key)
        append(self, client, hostname, key)

    policy.missing_host_key = missing_host_key  # type: ignore[method-assign]
    policy._pvegpu_once = True  # type: ignore[attr-defined]


def _int(name: str, value, where: str, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an integer in ``low..high``, else one FleetError line naming it.

    >>> _int("PVE_SSH_PORT", "0", "the environment", 1, 65535)
    Traceback (most recent call last):
    ...
    pvegpu.startup.fleet.FleetError: PVE_SSH_PORT=0 in the environment is outside 1..65535: fix it
    """
    try:
        if isinstance(value, (bool, float)):
            raise ValueError  # YAML's yes/no or 2.5 is not a whole number
        number = int(value)
    except (TypeError, ValueError):
        raise FleetError(f"{name}={value!r} in {where} is not a number: fix it") from None
    if (low is not None and number < low) or (high is not None and number > high):
        raise FleetError(f"{name}={number} in {where} is outside {low}..{high}: fix it")
    return number


def _port(name: str, value, where: str) -> int:
    return _int(name, value, where, 1, 65535)


def _vmid(name: str, value, where: str) -> int:
    # pve-common's pve-vmid format: 100..999999999 (ids below 100 are reserved by Proxmox).
    return _int(name, value, where, 100, 999999999)


def _key_file(name: str, value, where: str) -> str | None:
    """The SSH private key path, checked to exist on the controller (a missing key is one line,
    not a traceback from the SSH library)."""
    if not value:
        return None
    path = os.path.expanduser(str(value))
    if not os.path.isfile(path):
        raise FleetError(
            f"{name}={value} in {where} does not exist or is not a file: point it at "
            "the private key that logs in to the node"
        )
    return str(value)


def _check_unique(nodes: list[Node], where: str) -> list[Node]:
    """Each node once, each container once: a node or CT listed twice would be deployed twice,
    side by side."""
    seen: set[str] = set()
    for node in nodes:
        if node.address in seen:
            raise FleetError(
                f"node {node.address} is listed twice in {where}: list it once, "
                "with all its containers"
            )
        seen.add(node.address)
        twice = sorted({v for v in node.containers if node.containers.count(v) > 1})
        if twice:
            raise FleetError(
                f"CT {twice[0]} of node {node.address} is listed twice in {where}: "
                "list each container once"
            )
    return nodes


def container_entry(entry, where: str) -> tuple[int, dict]:
    """(vmid, its own settings) of one ``containers:`` entry: a vmid, or a mapping with
    ``vmid:`` and settings for that container alone; anything else is one FleetError line."""
    if isinstance(entry, dict):
        if "vmid" not in entry:
            raise FleetError(
                f"{where} containers entry {entry!r} has no vmid: write it as "
                "{vmid: 201, target_gpus: [4, 5, 6], drafter_gpus: [7]}"
            )
        own = {k: v for k, v in entry.items() if k != "vmid"}
        return _vmid("containers", entry["vmid"], where), own
    return _vmid("containers", entry, where), {}


def fleet_from_env(env: Mapping[str, str]) -> list[Node]:
    """One node (and one container) from PVE_* / CT_ID environment variables."""
    address = env["PVE_HOST"].strip()
    if not address:
        raise FleetError("PVE_HOST is empty: set it to the node's address")
    known_hosts_problem(env.get("PVE_SSH_KNOWN_HOSTS"), "PVE_SSH_KNOWN_HOSTS")
    return [
        Node(
            address=address,
            ssh_port=_port("PVE_SSH_PORT", env.get("PVE_SSH_PORT", "22"), "the environment"),
            ssh_user=env.get("PVE_SSH_USER", "root") or "root",
            ssh_key=_key_file("PVE_SSH_KEY", env.get("PVE_SSH_KEY"), "the environment"),
            ssh_known_hosts_file=env.get("PVE_SSH_KNOWN_HOSTS") or None,
            containers=(_vmid("CT_ID", env.get("CT_ID", "200"), "the environment"),),
        )
    ]


def fleet_from_file(path: Path) -> list[Node]:
    """Nodes from a YAML fleet file (see fleet.example.yaml)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise FleetError(
            f"fleet file {path} is not valid YAML ({e.__class__.__name__}): fix it"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) or not doc["nodes"]:
        raise FleetError(f"fleet file {path} has no `nodes:` list: see fleet.example.yaml")
    nodes = []
    for i, entry in enumerate(doc["nodes"]):
        where = f"{path} node {i + 1}"
        if not isinstance(entry, dict) or not entry.get("address"):
            raise FleetError(f"{where} has no address: add `address: <node address>`")
        known_hosts_problem(entry.get("ssh_known_hosts_file"), f"{where} ssh_known_hosts_file")
        containers = entry.get("containers", [200])
        if not isinstance(containers, list) or not containers:
            raise FleetError(
                f"{where} containers={containers!r} must be a list of vmids, e.g. [200]"
            )
        entries = [container_entry(c, where) for c in containers]
        nodes.append(
            Node(
                address=str(entry["address"]),
                ssh_port=_port("ssh_port", entry.get("ssh_port", 22), where),
                ssh_user=str(entry.get("ssh_user", "root")),
                ssh_key=_key_file("ssh_key", entry.get("ssh_key"), where),
                ssh_known_hosts_file=entry.get("ssh_known_hosts_file"),
                containers=tuple(vmid for vmid, _ in entries),
                data={k: v for k, v in entry.items() if k not in NODE_KEYS},
                container_data={vmid: own for vmid, own in entries if own},
            )
        )
    return _check_unique(nodes, str(path))


def load_fleet(env: Mapping[str, str], project_dir: Path) -> list[Node]:
    """Environment first, then $PVE_FLEET or fleet.yaml; otherwise the how-to error."""
    if env.get("PVE_HOST"):
        return fleet_from_env(env)
    path = Path(env["PVE_FLEET"]) if env.get("PVE_FLEET") else project_dir / "fleet.yaml"
    if path.exists():
        return fleet_from_file(path)
    if env.get("PVE_FLEET"):
        raise FleetError(f"PVE_FLEET={path} does not exist: point it at your fleet file")
    raise FleetError(HOW_TO_CONFIGURE)


def inventory_groups(nodes: list[Node]) -> tuple[list, list]:
    """The pyinfra groups (pve_hosts, training_cts) for a fleet."""
    record_new_host_keys_once()
    pve_hosts, training_cts = [], []
    for node in nodes:
        # the fleet's own keys win; startup.data_keys refuses a per-node key that is no setting
        ssh = node.ssh_data()
        data = {**node.data, **ssh}
        pve_hosts.append((node.address, {**data, "pve_ct_ids": list(node.containers)}))
        for vmid in node.containers:
            own = node.container_data.get(vmid, {})
            training_cts.append((f"@pct/{node.address}/{vmid}", {**node.data, **own, **ssh}))
    return pve_hosts, training_cts


def ungrouped_host_problems(hosts) -> list[str]:
    """Hosts deploy.py must refuse: a container whose node host is not in the run (its node's
    deploy lock and preflight would not cover it) and a host in neither group (deploy.py would do
    nothing to it and say it passed). One line each.

    >>> ungrouped_host_problems([])
    []
    """
    nodes = {h.name for h in hosts if "pve_hosts" in h.groups}
    fix = "run `pyinfra inventory.py deploy.py` (PVE_HOST and CT_ID, or fleet.yaml, name both)"
    lines = []
    for h in hosts:
        if "training_cts" in h.groups and h.data.get("pct_node") not in nodes:
            lines.append(
                f"{h.name}: its node {h.data.get('pct_node')} is not a pve_hosts host of this "
                f"run, so the node's deploy lock and preflight would not cover it: {fix}"
            )
        elif not {"pve_hosts", "training_cts"} & set(h.groups):
            lines.append(
                f"{h.name}: in neither pve_hosts nor training_cts, so deploy.py would change "
                f"nothing there: {fix}"
            )
    return lines
