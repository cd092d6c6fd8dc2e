"""Where path settings of different parts may lie: no delete or mount of pvegpu reaches data,
the system or another of them (one line each).

>>> placement_problems("/data", "/tank/dflash", {"venvs_dir": "/data/venvs"})
["venvs_dir='/data/venvs' overlaps data_dir_ct='/data' (a rebuild could reach the data): keep \
them apart (defaults: venvs_dir=/root/venvs, data_dir_ct=/data)"]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..guard import OWN_DIRS, PROXMOX_DIRS, is_within, overlaps, system_dir

# Trees no mount point and no data dir may be in (their contents are the operating system's).
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib*", "/proc", "/run", "/sbin", "/sys", "/usr")
# Where pvegpu deletes (builds) or replaces (the live link), with the default each is shown.
DEFAULT_HINT = {
    "venv_path": "/root/venv",
    "venvs_dir": "/root/venvs",
    "uv_cache_dir": "/root/.cache/uv",
}


def in_tree(path: str, trees: Iterable[str]) -> bool:
    """``path`` is one of ``trees`` or below one (an entry ending in ``*`` is a prefix).

    >>> in_tree("/lib64/x", ("/lib*",)), in_tree("/data/lib", ("/lib*",))
    (True, False)
    """
    for tree in trees:
        if tree.endswith("*"):
            first = path.split("/")[1] if path.count("/") else path
            if ("/" + first).startswith(tree[:-1]):
                return True
        elif is_within(path, tree):
            return True
    return False


def placement_problems(data_ct: str, data_node: str, reach: Mapping[str, str]) -> list[str]:
    """``data_ct``/``data_node``: data_dir_ct/node; ``reach``: the paths pvegpu deletes or
    replaces by key (venv_path, venvs_dir, uv_cache_dir). All well-formed paths."""
    errs = []
    data_ok = not (system_dir(data_ct) or in_tree(data_ct, SYSTEM_TREES + OWN_DIRS))
    if not data_ok:
        errs.append(
            f"data_dir_ct={data_ct!r} is a system directory of the container (the mount "
            f"would hide it): use a directory of its own, e.g. /data"
        )
    for key, path in reach.items():
        # inside a system tree too: the switch moves a directory at venv_path aside (/usr/bin)
        if system_dir(path) or in_tree(path, SYSTEM_TREES):
            errs.append(
                f"{key}={path!r} is a system directory: use a directory of its own, "
                f"e.g. the default {DEFAULT_HINT[key]}"
            )
        elif data_ok and overlaps(path, data_ct):
            errs.append(
                f"{key}={path!r} overlaps data_dir_ct={data_ct!r} (a rebuild could reach "
                f"the data): keep them apart (defaults: {key}={DEFAULT_HINT[key]}, "
                "data_dir_ct=/data)"
            )
    errs.extend(_mutual_overlaps(reach))
    if system_dir(data_node, PROXMOX_DIRS) or in_tree(data_node, SYSTEM_TREES + PROXMOX_DIRS):
        errs.append(
            f"data_dir_node={data_node!r} is a system directory of the node (it would be "
            "bind-mounted into the container): use a data directory, e.g. "
            "/tank/dflash"
        )
    return errs


def _mutual_overlaps(reach: Mapping[str, str]) -> list[str]:
    errs = []
    items = list(reach.items())
    for i, (a, pa) in enumerate(items):
        for b, pb in items[i + 1 :]:
            if overlaps(pa, pb) and not (system_dir(pa) or system_dir(pb)):
                errs.append(
                    f"{a}={pa!r} and {b}={pb!r} overlap (deleting one would reach "
                    f"the other): keep them apart, e.g. {a}={DEFAULT_HINT[a]} "
                    f"{b}={DEFAULT_HINT[b]}"
                )
    return errs
