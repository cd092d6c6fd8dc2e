"""The one guard every recursive delete of pvegpu goes through, and the path rules behind it.

A delete can only reach pvegpu's own build directories: a build under ``venvs_dir`` (its name is
``torch-<X.Y.Z>-<variant>`` plus ``.b<n>``, ``.building``, ``.next`` or ``.pvegpu-tmp``), anything
below ``/opt/pvegpu`` or ``/var/lib/pvegpu`` (uv installs, pvegpu's state), or a ``pvegpu-*``
temporary directory directly in ``/tmp`` or ``/var/tmp``. Everything else is refused, whatever a
setting says, so a wrong ``venvs_dir`` can cost at most a pvegpu build, never data.

>>> delete_command(["/root/venvs/torch-2.11.0-cu130.b2"], venvs_dir="/root/venvs")
'rm -rf -- /root/venvs/torch-2.11.0-cu130.b2'
>>> delete_command(["/data"], venvs_dir="/data")  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
...
pvegpu.guard.UnsafeDelete: refusing to delete /data: not one of pvegpu's own build directories
(<venvs_dir>/torch-<version>-<variant>[.b<n>|.building|.next], /opt/pvegpu/*, /var/lib/pvegpu/*,
/tmp/pvegpu-*)

This file is plain Python with no imports of pvegpu and no ``from __future__`` line: the probes
that delete (they run inside the container, where pvegpu is not installed) get its source
prepended (``facts.probe.probe_source``) and call ``remove_tree``.
"""

import os
import re
import shlex
import shutil

# Directories only pvegpu writes: anything strictly below them is pvegpu's own.
OWN_DIRS = ("/opt/pvegpu", "/var/lib/pvegpu")
# Where pvegpu's own temporary directories (``pvegpu-*``) live.
TEMP_DIRS = ("/tmp", "/var/tmp")
TEMP_PREFIX = "pvegpu-"
# The names pvegpu gives builds in venvs_dir (see pvegpu.plan.venvs).
BUILD_NAME_RE = re.compile(
    r"^torch-\d+\.\d+\.\d+-[A-Za-z0-9]+(\.b\d+|\.building|\.next|\.pvegpu-tmp)?$"
)
# Directories a setting must never name, equal or contain (node and container alike). A prefix
# ending in "*" covers its siblings (/lib, /lib64, /libx32, ...).
SYSTEM_DIRS = (
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib*",
    "/media",
    "/mnt",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
    "/var/lib",
    "/var/log",
    "/var/tmp",
)
# Node directories Proxmox itself owns (guest configs, images, templates, backups).
PROXMOX_DIRS = ("/etc/pve", "/var/lib/vz", "/var/lib/pve-cluster", "/var/lib/lxc")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
WHERE = (
    "<venvs_dir>/torch-<version>-<variant>[.b<n>|.building|.next], /opt/pvegpu/*, "
    "/var/lib/pvegpu/*, /tmp/pvegpu-*"
)


class UnsafeDelete(ValueError):
    """A delete was asked for a path outside pvegpu's own build directories."""


def path_problem(path):
    """Why ``path`` is not an absolute, normalised path fit for a command line or a Proxmox
    property string (None: it is).

    >>> path_problem("/data/x"), path_problem("/data/../etc"), path_problem("/tank/d,ro=1")
    (None, 'is not normalised: write /etc', "contains ',': Proxmox splits options on it")
    """
    if not isinstance(path, str) or not path.startswith("/"):
        return "must be an absolute path: start it with /"
    if CONTROL_RE.search(path):
        return "contains a newline or control character: remove it"
    if "," in path:
        return "contains ',': Proxmox splits options on it"
    normal = os.path.normpath(path).replace("//", "/")
    if normal != path:
        return f"is not normalised: write {normal}"
    return None


def is_within(path, parent):
    """``path`` is ``parent`` or below it (both normalised absolute paths).

    >>> is_within("/root/venvs", "/root"), is_within("/rootx", "/root"), is_within("/a", "/")
    (True, False, True)
    """
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def overlaps(a, b):
    """One of the two paths is the other or lies inside it: deleting one could reach the other."""
    return is_within(a, b) or is_within(b, a)


def system_dir(path, extra=()):
    """The protected directory ``path`` is (or, for a ``*`` entry, matches), else None.

    >>> system_dir("/lib64"), system_dir("/etc"), system_dir("/tank/data")
    ('/lib*', '/etc', None)
    """
    for entry in (*SYSTEM_DIRS, *extra):
        if (
            entry.endswith("*")
            and path.startswith(entry[:-1])
            and "/" not in path[len(entry) - 1 :]
        ):
            return entry
        if path == entry:
            return entry
    return None


def delete_refusal(path, venvs_dir=None):
    """Why ``path`` may not be deleted (None: it is one of pvegpu's own build directories).

    >>> delete_refusal("/opt/pvegpu/uv-0.9.0") is None, delete_refusal("/opt/pvegpu") is None
    (True, False)
    """
    problem = path_problem(path)
    if problem is None and system_dir(path, PROXMOX_DIRS) is None:
        parent, name = path.rsplit("/", 1)
        parent = parent or "/"
        if (
            venvs_dir
            and parent == venvs_dir
            and path_problem(venvs_dir) is None
            and system_dir(venvs_dir, PROXMOX_DIRS) is None
            and BUILD_NAME_RE.match(name)
        ):
            return None
        if any(path.startswith(own + "/") for own in OWN_DIRS):
            return None
        if parent in TEMP_DIRS and name.startswith(TEMP_PREFIX):
            return None
    return f"refusing to delete {path}: not one of pvegpu's own build directories ({WHERE})"


def check_delete(path, venvs_dir=None):
    """Return ``path`` when it may be deleted, else raise UnsafeDelete naming it."""
    refusal = delete_refusal(path, venvs_dir)
    if refusal:
        raise UnsafeDelete(refusal)
    return path


def delete_command(paths, venvs_dir=None):
    """The shell command deleting ``paths`` recursively, each checked first (UnsafeDelete).

    >>> delete_command(["/opt/pvegpu/a b"])
    "rm -rf -- '/opt/pvegpu/a b'"
    """
    checked = [check_delete(p, venvs_dir) for p in paths]
    if not checked:
        raise UnsafeDelete("refusing an empty delete: nothing to delete")
    return "rm -rf -- " + " ".join(shlex.quote(p) for p in checked)


def remove_tree(path, venvs_dir=None, ignore_errors=False):
    """Delete ``path`` (a directory tree, a file or a link: never what a link points at) after
    the same check as ``delete_command``; a missing path is no error. For code that deletes
    in-process (the probes, which get this file's source prepended)."""
    check_delete(path, venvs_dir)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=ignore_errors)
    elif os.path.lexists(path):
        os.unlink(path)
