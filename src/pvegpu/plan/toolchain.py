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


def install_toolchain_script(vmid: int, packages: list[str]) -> str:
    """A sh script for inside the container: ``packages`` from its own apt sources,
    non-interactive; on failure one line on stderr with apt's first error or warning, exit 1.

    ``libpython3.X-dev`` is pinned to the installed ``libpython3.X-stdlib``'s version: it depends
    on exactly its own version of the stdlib (Debian's control file: ``libpython3.X-stdlib (=
    ${binary:Version})``), so an unpinned install may upgrade the stdlib under a running
    training's interpreter; pinned, it never does (apt fails instead when the mirror lacks that
    version), and the install needs no wait for a training.

    >>> "install -y --no-install-recommends gcc" in install_toolchain_script(200, ["gcc"])
    True
    >>> s = install_toolchain_script(200, ["libpython3.11-dev"])
    >>> "dpkg-query -W -f='${Version}' libpython3.11-stdlib" in s and '"libpython3.11-dev$v"' in s
    True
    """
    dev = next((p for p in packages if re.fullmatch(r"libpython3\.\d+-dev", p)), None)
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
