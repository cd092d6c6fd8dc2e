"""A Debian tree's Python against its archive: what a real template's dpkg database says.

Debian's archive keeps only the newest version of each package per suite (superseded versions
live only on snapshot.debian.org), and Proxmox rebuilds its debian-<N>-standard templates
rarely, so a new container's python3.X is almost always one update behind the archive. The sim's
trees are built from the archive as it is now; a container made as the real templates are
(``SimNode(template_toolchain=False)``) records every binary package of its python3.X source
one update older (:func:`aged_status`), while the loopback mirror serves the tree's, newer ones
(``sim.aptrepo.ensure_toolchain_debs``): ``apt-get install libpython3.11-dev=<installed>`` then
fails as on a real node, and an unpinned install upgrades python3.11 along.

Plain stdlib: it also runs on the simulated node (``/usr/lib/pve-sim``, the pct double).

>>> older_version("3.11.2-6+deb12u8")
'3.11.2-6+deb12u7'
>>> older_version("3.13.5-2")
'3.13.5-2~sim1'
"""

from __future__ import annotations

import re

PYTHON_SOURCE = re.compile(r"python3\.\d+")


def stanzas(status_text: str) -> list[str]:
    """The stanzas of a dpkg status file's text."""
    return status_text.split("\n\n")


def field(stanza: str, name: str) -> str | None:
    """One field's value of a status stanza (None: absent)."""
    m = re.search(rf"^{name}: (.*)$", stanza, re.M)
    return m.group(1).strip() if m else None


def python_packages(status_text: str) -> dict[str, str]:
    """{name: version} of the installed binary packages built from a ``python3.X`` source
    (python3.11, python3.11-minimal, libpython3.11-stdlib, ...): what moves together when
    libpython3.X-dev is installed at the archive's version."""
    out = {}
    for st in stanzas(status_text):
        name, version = field(st, "Package"), field(st, "Version")
        source = (field(st, "Source") or name or "").split(" ")[0]
        installed = re.search(r"^Status: install ok installed$", st, re.M)
        if name and version and installed and PYTHON_SOURCE.fullmatch(source):
            out[name] = version
    return out


def older_version(version: str) -> str:
    """A version dpkg orders just before ``version``: the previous Debian stable update
    (``+deb12u8`` -> ``+deb12u7``), else ``version`` with ``~sim1`` (``~`` sorts first)."""
    m = re.fullmatch(r"(.*\+deb\d+u)(\d+)", version)
    if m and int(m.group(2)) > 1:
        return f"{m.group(1)}{int(m.group(2)) - 1}"
    return f"{version}~sim1"


def aged_status(status_text: str) -> str:
    """``status_text`` with every python3.X-source package one version older, and every exact
    reference to those versions (``(= v)``, ``(>= v)`` in Depends) too, so dpkg's database stays
    consistent: what a template built before the archive's last python3.X update records."""
    versions = set(python_packages(status_text).values())
    out = status_text
    for version in versions:
        # a version is followed by ")" or a line end wherever the status file names it
        out = re.sub(rf"(?<=[ (]){re.escape(version)}(?=[)\n]|$)", older_version(version), out)
    return out
