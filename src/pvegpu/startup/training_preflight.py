"""Prepare-time check of the training unit's inputs: the training script and its working
directory must exist before anything changes (a unit whose script is missing would crash-loop, and
systemd refuses to start one whose WorkingDirectory= is missing).

Where they are checked: a path under ``data_dir_ct`` lives on the node (the container bind-mounts
``data_dir_node`` there), so it is checked on the node, which works before the container even
exists and survives every rebuild; any other path is checked inside the container, which must then
already exist and run (a fresh or rebuilt container could never have it, so that is reported too).

>>> from pvegpu.settings import Settings, defaults
>>> node_path(Settings.from_data(defaults()), "/data/dflash/train.py")
'/tank/dflash/dflash/train.py'
>>> node_path(Settings.from_data(defaults()), "/root/train.py") is None
True
"""

from __future__ import annotations

from ..facts.training import PathKinds
from ..settings import Settings

# (variable, what it must be)
TRAINING_PATHS = (("training_script", "file"), ("training_workdir", "directory"))


def node_path(settings: Settings, path: str) -> str | None:
    """The node path of a container path under the bind-mounted data dir, else None."""
    ct_root = settings.container.data_dir_ct.rstrip("/")
    if path != ct_root and not path.startswith(ct_root + "/"):
        return None
    return settings.container.data_dir_node.rstrip("/") + path[len(ct_root) :]


def path_problems(
    settings: Settings, kinds_on_node: dict, kinds_in_ct: dict, node: str, vmid
) -> list[str]:
    """One line per training path that is not what the unit needs.

    >>> from pvegpu.settings import defaults
    >>> path_problems(Settings.from_data(defaults()),
    ...               {"/tank/dflash/dflash": "directory",
    ...                "/tank/dflash/dflash/train.py": "missing"},
    ...               {}, "n1", 200)[0].split(":")[:2]  # doctest: +NORMALIZE_WHITESPACE
    ['n1',
     ' training_script=/data/dflash/train.py is missing (node path /tank/dflash/dflash/train.py)']
    """
    problems = []
    for key, want in TRAINING_PATHS:
        path = settings.value(key)
        on_node = node_path(settings, path)
        if on_node is not None:
            found = kinds_on_node.get(on_node, "missing")
            if found != want:
                problems.append(
                    f"{node}: {key}={path} is {'missing' if found == 'missing' else 'a ' + found} "
                    f"(node path {on_node}): put the training "
                    f"{'script' if want == 'file' else 'directory'} "
                    f"at {on_node} on the node (CT {vmid} sees "
                    f"{settings.container.data_dir_node} at {settings.container.data_dir_ct}), "
                    f"or fix {key}"
                )
        else:
            found = kinds_in_ct.get(path)
            if found != want:
                state = "missing" if found in (None, "missing") else "a " + found
                problems.append(
                    f"{node}: {key}={path} is {state} in CT {vmid} (or CT {vmid} does not run "
                    "yet): "
                    f"keep it under data_dir_ct={settings.container.data_dir_ct} (node: "
                    f"{settings.container.data_dir_node}), "
                    f"which exists before the container and outlives every rebuild"
                )
    return problems


def node_training_paths(inventory, settings: dict, node_name: str) -> list[str]:
    """The node paths of the training paths of every training container on node ``node_name``
    (the preflight reads their kinds with the node's state, in the same command)."""
    paths = []
    for ct in inventory.get_group("training_cts", []):
        if ct.data.get("pct_node") == node_name:
            s = settings[ct.name]
            found = (node_path(s, s.value(key)) for key, _ in TRAINING_PATHS)
            paths += [p for p in found if p is not None and p not in paths]
    return paths


def training_path_problems(inventory, settings: dict, node_kinds: dict | None = None) -> list[str]:
    """Check every training container's script and working directory (see the module doc): paths
    under the data dir on the node (from ``node_kinds``, {node name: {path: kind}}, the
    preflight's node reads; else one command per node), one command per container for the
    others."""
    node_kinds = node_kinds or {}
    problems = []
    for ct in inventory.get_group("training_cts", []):
        s = settings[ct.name]
        node = inventory.get_host(ct.data.get("pct_node"), None)
        vmid = ct.data.get("pct_vmid")
        node_name = node.name if node is not None else str(ct.data.get("pct_node"))
        paths = [s.value(key) for key, _ in TRAINING_PATHS]
        on_node = [node_path(s, p) for p in paths if node_path(s, p) is not None]
        in_ct = [p for p in paths if node_path(s, p) is None]
        kinds_on_node = node_kinds.get(node_name)
        if kinds_on_node is None or not set(on_node) <= set(kinds_on_node):
            kinds_on_node = (
                node.get_fact(PathKinds, paths=on_node) if on_node and node is not None else {}
            )
        kinds_in_ct = ct.get_fact(PathKinds, paths=in_ct) if in_ct else {}
        problems += path_problems(s, kinds_on_node, kinds_in_ct, node_name, vmid)
    return problems
