"""What the node's Proxmox VE can do with devices, by its versions: devN entries (pve-container
>= 5.0.7), hot-plug into a running container (>= 6.0.4), and the passthrough mode that follows.
"""

from __future__ import annotations

import re


def version_tuple(text: str | None) -> tuple[int, int, int]:
    """The first three numbers of a Debian package version, zero-padded.

    >>> version_tuple("5.0.7"), version_tuple("8.2"), version_tuple("4.4-4"), version_tuple(None)
    ((5, 0, 7), (8, 2, 0), (4, 4, 4), (0, 0, 0))
    """
    parts = [int(x) for x in re.findall(r"\d+", text or "")[:3]] + [0, 0, 0]
    return parts[0], parts[1], parts[2]


# pve-container 5.0.7 (2023-11-21, commit ce1976b "Add device passthrough") brought devN; PVE 8.1
# shipped it. pve-manager only depends on a pve-container with devN from 8.2.4 (>= 5.1.11).
DEVN_PVE_CONTAINER = (5, 0, 7)
DEVN_PVE_MANAGER = (8, 2, 4)


def devn_supported(state: dict) -> bool:
    """Whether the node's pct takes ``devN`` entries: by its pve-container version; by the
    pve-manager whose dependencies guarantee one when pve-container is unknown.

    >>> devn_supported({"pve_version": "8.1.4", "pve_container": "5.0.8"})
    True
    >>> devn_supported({"pve_version": "8.0.4", "pve_container": "5.0.4"})
    False
    >>> devn_supported({"pve_version": "8.2.2"}), devn_supported({"pve_version": "8.4.1"})
    (False, True)
    """
    if state.get("pve_container"):
        return version_tuple(state["pve_container"]) >= DEVN_PVE_CONTAINER
    return version_tuple(state.get("pve_version")) >= DEVN_PVE_MANAGER


def select_mode(setting: str, state: dict) -> str:
    """``dev`` where the node's pct takes devN entries, ``lxc`` before, unless forced.

    >>> select_mode("auto", {"pve_version": "8.1.4", "pve_container": "5.0.8"})
    'dev'
    >>> select_mode("auto", {"pve_container": "5.0.6"}), select_mode("lxc", {"pve_version": "9.1"})
    ('lxc', 'lxc')
    """
    if setting != "auto":
        return setting
    return "dev" if devn_supported(state) else "lxc"


def device_hotplug(state: dict) -> bool:
    """Whether the node hot-plugs a devN added to a running container: pve-container >= 6.0.4
    (commit "implement device hotplug", PVE 9); by the PVE major when pve-container is unknown.

    >>> device_hotplug({"pve_container": "6.0.18"}), device_hotplug({"pve_container": "5.2.6"})
    (True, False)
    >>> device_hotplug({"pve_version": "9.0.3"}), device_hotplug({"pve_version": "8.4.1"})
    (True, False)
    """
    container = re.findall(r"\d+", state.get("pve_container") or "")
    if len(container) >= 3:
        return tuple(int(x) for x in container[:3]) >= (6, 0, 4)
    major = re.match(r"(\d+)", state.get("pve_version") or "")
    return major is not None and int(major.group(1)) >= 9
