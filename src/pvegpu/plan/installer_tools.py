"""What NVIDIA's .run installer needs in a container before it installs anything.

nvidia-installer looks up these utilities even with ``--no-kernel-modules`` and aborts when one
is missing (NVIDIA/nvidia-installer: nvidia-installer.c main() calls find_system_utils() and
find_module_utils(); misc.c lists them). It searches ``$PATH`` and then ``/bin:/usr/bin:/sbin:
/usr/sbin:/usr/X11R6/bin:/usr/bin/X11``. The container probe reports the missing ones; kmod's
(modprobe, rmmod, lsmod, depmod) are installed from the container's own apt sources, the others
stop the deploy with one line naming them.

>>> plan_tools(["modprobe", "lsmod"])
('install_kmod', ['modprobe', 'lsmod'])
>>> plan_tools([])
('ok', [])
"""

from __future__ import annotations

import shlex

# Utility -> the Debian package that ships it, in the installer's own search order.
INSTALLER_TOOLS = {
    "ldconfig": "libc-bin",
    "grep": "grep",
    "dmesg": "util-linux",
    "tail": "coreutils",
    "modprobe": "kmod",
    "rmmod": "kmod",
    "lsmod": "kmod",
    "depmod": "kmod",
}


def plan_tools(missing) -> tuple[str, list[str]]:
    """("ok" | "install_kmod" | "fail", the missing tools in the installer's order)."""
    missing = [t for t in INSTALLER_TOOLS if t in set(missing or ())]
    if not missing:
        return "ok", []
    if all(INSTALLER_TOOLS[t] == "kmod" for t in missing):
        return "install_kmod", missing
    return "fail", missing


def missing_tools_line(vmid, missing) -> str:
    """The one line for tools the deploy does not install itself.

    >>> missing_tools_line(200, ["dmesg", "modprobe"])[:55]
    'CT 200 lacks dmesg, modprobe, which the NVIDIA installe'
    """
    packages = list(dict.fromkeys(INSTALLER_TOOLS[t] for t in missing))
    return (
        f"CT {vmid} lacks {', '.join(missing)}, which the NVIDIA installer needs even with "
        f"--no-kernel-modules: install {' '.join(packages)} in it "
        f"(pct exec {vmid} -- apt-get install -y {' '.join(packages)}), then deploy again"
    )


def missing_installer_line(vmid, driver: str, found: str, installer_dir: str) -> str:
    """The one line for NVIDIA userspace the deploy cannot install: the .run installer of the
    node's driver is not in ``installer_dir`` (``found``: what the container has instead).

    >>> missing_installer_line(200, "580.95.05", "has none", "/root")[:55]
    'CT 200 needs NVIDIA userspace 580.95.05 (has none), but'
    """
    return (
        f"CT {vmid} needs NVIDIA userspace {driver} ({found}), but "
        f"NVIDIA-Linux-x86_64-{driver}.run is not in {installer_dir} on the node: "
        f"copy the installer of the node's driver there (or set nvidia_installer_dir)"
    )


def install_kmod_script(vmid, missing) -> str:
    """A sh script for inside the container: kmod from its own apt sources, non-interactive;
    on failure one line on stderr with apt's first error or warning, and exit 1.

    >>> "apt-get -q install -y --no-install-recommends kmod" in install_kmod_script(200, ["lsmod"])
    True
    """
    what = (
        f"CT {vmid} lacks kmod ({', '.join(missing)}), which the NVIDIA installer needs, "
        f"and apt-get could not install it"
    )
    fix = (
        f"give CT {vmid} an apt source that has kmod (e.g. the site's Debian mirror) or "
        f"install kmod in it, then deploy again"
    )
    # apt-get update may fail for one source and still leave kmod installable: the install
    # decides; apt's own output is kept out of the way and only its first E:/W: line reported.
    return (
        "export DEBIAN_FRONTEND=noninteractive; "
        "out=$( { apt-get -q update; apt-get -q install -y --no-install-recommends kmod; } "
        "2>&1 ) || { err=$(printf '%s\\n' \"$out\" | grep -m1 -E '^[EW]: '); "
        f"printf '%s (%s): %s\\n' {shlex.quote(what)} \"${{err:-apt-get failed}}\" "
        f"{shlex.quote(fix)} >&2; exit 1; }}"
    )
