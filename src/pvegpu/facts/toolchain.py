"""What a container's apt sources offer for its Python headers, read from its node."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from ..guard import delete_command

#: Where the archive read keeps apt's lists while it runs (pvegpu's own directory).
LISTS = "/var/lib/pvegpu/archive-lists"


def archive_versions_script(dev: str) -> str:
    """A sh script for inside the container that installs nothing: ``installed <v>`` (the
    installed ``libpython3.X-stdlib``'s version), then ``archive <v>`` for each version of
    ``dev`` its apt sources have now (read into pvegpu's own lists directory, ``LISTS``, deleted
    after: the container's own apt lists and caches are not touched).

    >>> s = archive_versions_script("libpython3.11-dev")
    >>> "libpython3.11-stdlib" in s and "madison libpython3.11-dev" in s
    True
    """
    stdlib = dev.removesuffix("-dev") + "-stdlib"
    opts = (
        '-o Dir::State::Lists="$d" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= '
        "-o APT::Sandbox::User=root"
    )
    return (
        f"printf 'installed %s\\n' \"$(dpkg-query -W -f='${{Version}}' {stdlib} 2>/dev/null)\"; "
        f'd={LISTS}; {delete_command([LISTS])}; mkdir -p "$d/partial" || exit 1; '
        f"apt-get -q {opts} update >/dev/null 2>&1; "
        f"apt-cache {opts} madison {shlex.quote(dev)} 2>/dev/null "
        "| awk -F'|' '{gsub(/ /, \"\", $2); print \"archive \" $2}'; "
        f"{delete_command([LISTS])}"
    )


class ToolchainArchive(FactBase):
    """The installed ``libpython3.X-stdlib``'s version in CT ``vmid`` and the versions of
    ``dev`` (``libpython3.X-dev``) its apt sources have now, read without changing it.

    .. code:: python

        found = host.get_fact(ToolchainArchive, vmid=200, dev="libpython3.11-dev")
        found  # {"installed": "3.11.2-6+deb12u7", "archive": ["3.11.2-6+deb12u8"]}

    Debian's archive keeps only the newest version of a package, so the pinned install a
    running training needs is possible only when both agree (``pinned_in_archive``).
    """

    def command(self, vmid, dev):
        script = archive_versions_script(dev)
        return f"pct exec {int(vmid)} -- sh -c {shlex.quote(script)}"

    @staticmethod
    def default():
        return {}

    def process(self, output):
        found: dict = {"installed": None, "archive": []}
        for line in output:
            key, _, value = line.strip().partition(" ")
            if key == "installed":
                found["installed"] = value.strip() or None
            elif key == "archive" and value.strip():
                found["archive"].append(value.strip())
        return found
