"""What torch.compile needs in the container besides the venv: Triton builds a small C extension
at its first CUDA kernel (triton/runtime/build.py: ``$CC``, else gcc, else clang on PATH, and
``-I`` the Python headers of the venv's Python). Proxmox's debian-12/13-standard templates have
neither (gcc and libpython3.X-dev are Priority optional), so a container pvegpu creates gets them
from its own apt sources, as kmod.

>>> toolchain_packages({"cc": None, "python": "python3.11", "python_h": False})
['gcc', 'libpython3.11-dev']
>>> toolchain_packages({"cc": "/usr/bin/gcc", "python": "python3.11", "python_h": True})
[]
"""

from __future__ import annotations

import re
import shlex

#: How the toolchain install that waits for a training begins (its waiting line: verification
#: reads it).
TOOLCHAIN_INSTALL = "apt-get install "


def toolchain_packages(toolchain: dict | None) -> list[str]:
    """The Debian packages a container's ``toolchain`` view lacks ([] when complete or unread):
    gcc without a C compiler, ``libpython3.X-dev`` (Python.h) without the headers of its
    python3.X."""
    if not toolchain:
        return []
    packages = [] if toolchain.get("cc") else ["gcc"]
    python = toolchain.get("python") or ""
    if not toolchain.get("python_h") and re.fullmatch(r"python3\.\d+", python):
        packages.append(f"lib{python}-dev")
    return packages


def toolchain_lacks(toolchain: dict) -> str:
    """What a container lacks, in words.

    >>> toolchain_lacks({"cc": None, "python": "python3.13", "python_h": True})
    'a C compiler (gcc or clang)'
    """
    lacks = [] if toolchain.get("cc") else ["a C compiler (gcc or clang)"]
    if not toolchain.get("python_h"):
        python = toolchain.get("python") or "python3"
        lacks.append(f"{python}'s headers (/usr/include/{python}/Python.h)")
    return " and ".join(lacks)


def dev_package(packages: list[str]) -> str | None:
    """The ``libpython3.X-dev`` among ``packages`` (None: none).

    >>> dev_package(["gcc", "libpython3.11-dev"])
    'libpython3.11-dev'
    """
    return next((p for p in packages if re.fullmatch(r"libpython3\.\d+-dev", p)), None)


def install_toolchain_script(vmid: int, packages: list[str], pinned: bool = False) -> str:
    """A sh script for inside the container: ``packages`` from its own apt sources,
    non-interactive; on failure one line on stderr with apt's first error or warning, exit 1.

    ``pinned`` (a training runs there): ``libpython3.X-dev`` at the installed
    ``libpython3.X-stdlib``'s version. It depends on exactly its own version of the stdlib
    (Debian's control file: ``libpython3.X-stdlib (= ${binary:Version})``), so unpinned it
    upgrades python3.X to the archive's version, which is right when nothing runs on it and
    wrong under a running interpreter. Debian's archive keeps only the newest version, so the
    caller checks that the pinned one is there first (``facts.toolchain.ToolchainArchive``).

    >>> "install -y --no-install-recommends gcc" in install_toolchain_script(200, ["gcc"])
    True
    >>> s = install_toolchain_script(200, ["libpython3.11-dev"], pinned=True)
    >>> "dpkg-query -W -f='${Version}' libpython3.11-stdlib" in s and '"libpython3.11-dev$v"' in s
    True
    >>> "dpkg-query" in install_toolchain_script(200, ["libpython3.11-dev"])
    False
    """
    dev = dev_package(packages) if pinned else None
    names = " ".join(shlex.quote(p) for p in packages if p != dev)
    pin = ""
    if dev:
        stdlib = dev.removesuffix("-dev") + "-stdlib"
        pin = f"v=$(dpkg-query -W -f='${{Version}}' {stdlib} 2>/dev/null) && v=${{v:+=$v}}; "
        names = f'{names} "{dev}$v"'.strip()
    what = (
        f"CT {vmid} lacks {' and '.join(packages)}, which torch.compile (Triton) needs to build "
        f"its C helper, and apt-get could not install them"
    )
    fix = (
        f"give CT {vmid} an apt source that has them (e.g. the site's Debian mirror) or install "
        f"them in it, then deploy again"
    )
    return (
        f"export DEBIAN_FRONTEND=noninteractive; {pin}"
        f"out=$( {{ apt-get -q update; apt-get -q install -y --no-install-recommends {names}; }} "
        "2>&1 ) || { err=$(printf '%s\\n' \"$out\" | grep -m1 -E '^[EW]: '); "
        f"printf '%s (%s): %s\\n' {shlex.quote(what)} \"${{err:-apt-get failed}}\" "
        f"{shlex.quote(fix)} >&2; exit 1; }}"
    )


def pinned_in_archive(found: dict | None) -> bool:
    """Whether the archive read (``facts.toolchain.ToolchainArchive``) has the installed
    version; False when it could not be read (fail closed: the install would fail).

    >>> pinned_in_archive({"installed": "3.11.2-6+deb12u7", "archive": ["3.11.2-6+deb12u8"]})
    False
    >>> pinned_in_archive({"installed": "3.11.2-6+deb12u8", "archive": ["3.11.2-6+deb12u8"]})
    True
    """
    if not found or not found.get("installed"):
        return False
    return found["installed"] in found.get("archive", [])


def toolchain_wait_change(vmid: int, packages: list[str]) -> str:
    """The toolchain install that waits for a training, in words: the archive has only a newer
    libpython3.X-dev, which would upgrade the training's python3.X under it.

    >>> toolchain_wait_change(200, ["gcc", "libpython3.11-dev"])[:60]
    "apt-get install gcc libpython3.11-dev (CT 200's apt sources "
    """
    dev = dev_package(packages) or "libpython3-dev"
    python = dev.removeprefix("lib").removesuffix("-dev")
    return (
        f"{TOOLCHAIN_INSTALL}{' '.join(packages)} (CT {vmid}'s apt sources have no {dev} of its "
        f"installed {python}: a newer one would upgrade {python} under the training)"
    )
