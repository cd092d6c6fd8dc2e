"""Every key of a host's data is known: a pvegpu setting, pyinfra's own (a global argument such as
``_sudo``, a connector's ``ssh_*``), the fleet's (``pct_*``, ``pve_ct_ids``), or one the user
declares as theirs (``x_`` prefix, ``extra_data_keys``). Any other key is most likely a typo, which
pyinfra would ignore while the default wins: it stops the run, one line per key, with where it came
from and the closest known key.

>>> key_line("torch_varient", "--data", ["torch_variant", "torch_version"])
'torch_varient (--data): not a setting; did you mean torch_variant?'
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from typing import Any, get_type_hints

from pyinfra.api.arguments import all_global_arguments
from pyinfra.connectors.ssh import SSHConnector

from ..connectors.pct import PCT_DATA_KEYS
from ..settings import data_keys
from .fleet import FLEET_DATA_KEYS, NODE_KEYS

#: Keys starting with this are the user's own, never a typo.
OWN_PREFIX = "x_"
OWN_KEYS_SETTING = "extra_data_keys"
HOW_TO_KEEP = (
    "fix each name above (every setting: group_data/all.py, docs/variables.md); a key of your "
    f"own: start it with {OWN_PREFIX} or list it in {OWN_KEYS_SETTING}"
)


@cache
def pyinfra_keys(connectors: frozenset[type] = frozenset()) -> frozenset[str]:
    """pyinfra's own data keys: its global arguments (``_sudo``, ...) and the data of the SSH
    connector and of ``connectors`` (their ``data_cls``), plus the ``@pct`` and fleet keys."""
    keys = {name for name, _ in all_global_arguments()}
    for connector in {SSHConnector, *connectors}:
        keys |= set(get_type_hints(getattr(connector, "data_cls", dict)))
    return frozenset(keys | set(PCT_DATA_KEYS) | set(FLEET_DATA_KEYS))


def key_line(key: str, source: str | None, known: Iterable[str]) -> str:
    """One line for an unknown key: where it came from and the closest known key, if any."""
    where = f" ({source})" if source else ""
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"did you mean {close[0]}?" if close else "no setting is named like it"
    return f"{key}{where}: not a setting; {hint}"


def data_layers(host) -> Iterator[tuple[str | None, Mapping[str, Any]]]:
    """(source, data) of each layer of a pyinfra host's data, highest first as pyinfra merges
    them (pyinfra.api.host.Host.data): --data, the inventory's host data (the fleet), each group's
    group_data file, group_data/all.py. A host without an inventory: its data, source unknown."""
    inventory = getattr(host, "inventory", None)
    if inventory is None:
        yield None, dict(host.data)
        return
    yield "--data", inventory.get_override_data()
    yield "the fleet file or inventory", inventory.get_host_data(host.name)
    for group in reversed(list(host.groups)):  # the last group's value wins
        yield f"group_data/{group}.py", inventory.get_group_data(group)
    yield "group_data/all.py", inventory.get_data()


def own_keys(host) -> set[str]:
    """The keys ``extra_data_keys`` declares (a malformed value is the settings' to refuse)."""
    raw = host.data.get(OWN_KEYS_SETTING)
    if isinstance(raw, str):
        raw = [raw]
    return {k for k in raw if isinstance(k, str)} if isinstance(raw, (list, tuple)) else set()


def unknown_keys(host) -> list[tuple[str, str | None]]:
    """(key, source) of each key in ``host``'s data that no one reads, in layer order."""
    connector = getattr(host, "connector_cls", None)
    known = set(data_keys()) | pyinfra_keys(frozenset([connector] if connector else []))
    known |= own_keys(host)
    found: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    for source, data in data_layers(host):
        for key in data:
            if key in known or key in seen or key.startswith(OWN_PREFIX):
                continue
            seen.add(key)
            found.append((key, source))
    return found


#: Settings that decide one run only (destructive or consenting): taken from --data alone.
ONE_RUN_KEYS = ("rebuild", "restart_training", "adopt", "destroy_volumes")


def one_run_lines(hosts) -> list[str]:
    """One line per one-run setting (:data:`ONE_RUN_KEYS`) set to anything but its off value in
    a layer other than ``--data`` (a group_data file, the fleet file): left there, a ``rebuild:
    container`` would destroy the container on every deploy. Each once, however many hosts.

    .. code:: python

        one_run_lines(list(state.inventory))
        # ['rebuild=container (group_data/all.py): a one-run decision, ...']
    """
    lines: list[str] = []
    for host in hosts:
        for source, data in data_layers(host):
            if source == "--data" or source is None:
                continue
            for key in ONE_RUN_KEYS:
                value = data.get(key)
                if value in (None, False, "", "false", "False", "0", 0):
                    continue
                line = (
                    f"{key}={value} ({source}): a one-run decision, taken from --data only; "
                    f"remove it there and pass --data {key}={value} to the run that needs it"
                )
                if line not in lines:
                    lines.append(line)
    return lines


def unknown_key_lines(hosts) -> list[str]:
    """One line per unknown key (a key in data several hosts share, such as --data or the fleet
    file's node entry that its containers inherit, once, naming the hosts when it is theirs
    alone), then how to keep a key of one's own; empty when every key is known.

    .. code:: python

        unknown_key_lines(list(state.inventory))
        # ['torch_varient (--data): not a setting; did you mean torch_variant?', ...]
    """
    candidates = [*data_keys(), *pyinfra_keys(), *NODE_KEYS]
    hosts_of: dict[tuple[str, str | None], list[str]] = {}
    for host in hosts:
        for key, source in unknown_keys(host):
            hosts_of.setdefault((key, source), []).append(host.name)
    lines = []
    for (key, source), names in hosts_of.items():
        line = key_line(key, source, candidates)
        shared = source is not None and source.startswith(("--data", "group_data/"))
        lines.append(line if shared else f"{', '.join(names)}: {line}")
    return lines + [HOW_TO_KEEP] if lines else []
