"""Which template `pct create` uses: ``ct_template`` when set, else the Debian standard template
that matches the node's Proxmox VE major version (Debian 12 on PVE 8, Debian 13 on PVE 9).

Template names follow Proxmox's appliance builds (proxmox/dab-pve-appliances, ``dab.conf``:
``<Name>_<Version>_amd64.tar.zst``, e.g. ``debian-13-standard_13.1-2_amd64.tar.zst``); `pveam`
stores them in the ``local`` storage (/var/lib/vz/template/cache), which the node's probe lists.

>>> default_template(None, "9.1.1", ["debian-13-standard_13.1-2_amd64.tar.zst"])
'local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst'
>>> default_template("local:vztmpl/my.tar.zst", "9.1.1", [])
'local:vztmpl/my.tar.zst'
"""

from __future__ import annotations

import re

# The newest standard template of each Debian release when this was written: what the error
# line tells the user to download when the node has none.
KNOWN = {
    12: "debian-12-standard_12.12-1_amd64.tar.zst",
    13: "debian-13-standard_13.1-2_amd64.tar.zst",
}


def debian_major(pve_version: str | None) -> int:
    """The Debian release a Proxmox VE release is built on (PVE 8: 12 bookworm, 9: 13 trixie).

    >>> debian_major("8.4.1"), debian_major("9.0.3"), debian_major(None)
    (12, 13, 12)
    """
    m = re.match(r"(\d+)", pve_version or "")
    return 13 if m and int(m.group(1)) >= 9 else 12


def newest_standard(debian: int, templates: list[str]) -> str | None:
    """The newest ``debian-<N>-standard_<N>.<x>-<rev>_amd64.tar.*`` among ``templates``.

    >>> newest_standard(12, ["debian-12-standard_12.7-1_amd64.tar.zst",
    ...                      "debian-12-standard_12.12-1_amd64.tar.zst", "x.tar.zst"])
    'debian-12-standard_12.12-1_amd64.tar.zst'
    """
    pattern = re.compile(
        rf"^debian-{debian}-standard_{debian}\.(\d+)-(\d+)_amd64\.tar\.(zst|gz|xz)$"
    )
    found = []
    for name in templates:
        m = pattern.match(name)
        if m:
            found.append(((int(m.group(1)), int(m.group(2))), name))
    return max(found)[1] if found else None


def default_template(setting: str | None, pve_version: str | None, templates: list[str]) -> str:
    """``storage:vztmpl/file`` for `pct create`: the setting when given, else the newest standard
    template of the node's Debian release in local storage, else the known name (which the
    caller reports as missing, with the `pveam download` line)."""
    if setting:
        return setting
    debian = debian_major(pve_version)
    name = newest_standard(debian, templates) or KNOWN[debian]
    return f"local:vztmpl/{name}"
