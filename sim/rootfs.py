"""Debian base trees for simulated containers, built once with debootstrap and cached.

    python -m sim.rootfs build trixie      # build (or reuse) the Debian 13 tree; prints its path
    python -m sim.rootfs path trixie       # the cached tree's path (exit 1 when not built)

    from sim.rootfs import ensure_tree
    tree = ensure_tree("trixie")           # Path to the unpacked tree (built on first use)

A tree is `debootstrap --variant=minbase --include=<PACKAGES> <release>` from Debian's archive
(real systemd, python3 with venv, ca-certificates), trimmed of apt lists, docs, man pages and
locales. It lives under ``$PVE_SIM_ROOTFS_CACHE`` (default ``~/.cache/pvegpu-sim/rootfs``) in a
directory named after the release and a hash of its recipe (release, mirror, packages, trim
list, this builder's version): a changed recipe builds a new tree, an unchanged one is never
downloaded again. ``.ci/setup`` builds the trees the tests use; a test run only reads them.

Proxmox's own ``debian-<N>-standard`` templates (proxmox/dab-pve-appliances, built by
proxmox/dab ``bootstrap``) hold every package of priority required, important and standard plus
less, ssh, openssh-server, logrotate and postfix; minbase + the packages below is the part of
that the product touches (python3, systemd, and kmod: priority important, so in every real
standard template, and nvidia-installer needs its modprobe/rmmod/lsmod/depmod). gcc and
libpython3-dev (what torch.compile's Triton compiles with) are NOT in a real standard template
(Priority optional): the trees carry them so that tests not about them need no apt mirror, and
``SimNode(template_toolchain=False)`` takes them out of a container as the real template has it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

DEFAULT_CACHE = Path("~/.cache/pvegpu-sim/rootfs")
MIRROR = "http://deb.debian.org/debian"
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    # Priority standard, so in debian-<N>-standard: pam_systemd and /etc/pam.d/systemd-user,
    # which a user's own manager (user@<uid>.service, `systemctl --user`) starts with
    "libpam-systemd",
    "python3",
    "python3-venv",
    "ca-certificates",
    "kmod",
    # the standard templates' cron (debian-12/13-standard): users start trainings from crontabs,
    # and Debian's cron.service (KillMode=process) only starts them
    "cron",
    "gcc",
    "libpython3-dev",
)
TRIM = (
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/cache/apt/archives",
    "var/cache/debconf/templates.dat-old",
    "var/log/bootstrap.log",
)
# Bump when the build steps change in a way the fields above do not show.
BUILDER_VERSION = 1
# The Debian release of each Proxmox template the sim offers, and its system Python.
RELEASES = {
    "bookworm": {"debian": "12", "python": "3.11"},
    "trixie": {"debian": "13", "python": "3.13"},
}


class RootfsError(RuntimeError):
    pass


def recipe(release: str) -> dict:
    """Everything that decides a tree's contents (its hash names the cache entry).

    >>> recipe("trixie")["command"][:2]
    ['debootstrap', '--variant=minbase']
    """
    if release not in RELEASES:
        raise RootfsError(f"unknown release {release!r}: use one of {', '.join(RELEASES)}")
    return {
        "release": release,
        "mirror": MIRROR,
        "trim": list(TRIM),
        "builder": BUILDER_VERSION,
        "command": ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", release],
    }


def recipe_key(release: str) -> str:
    """``<release>-<12 hex of the recipe's sha256>``, e.g. ``trixie-3f1c0a9e2b44``."""
    text = json.dumps(recipe(release), sort_keys=True)
    return f"{release}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def cache_dir() -> Path:
    return Path(os.environ.get("PVE_SIM_ROOTFS_CACHE") or DEFAULT_CACHE).expanduser()


def tree_path(release: str) -> Path:
    """Where the tree of ``release``'s current recipe lives (built or not)."""
    return cache_dir() / recipe_key(release) / "tree"


def cached_tree(release: str) -> Path | None:
    """The finished tree of the current recipe, or None (a half-built one does not count)."""
    tree = tree_path(release)
    return tree if (tree.parent / "complete").exists() and tree.is_dir() else None


def ensure_tree(release: str, log=sys.stderr) -> Path:
    """The cached tree for ``release``, built now when missing (needs root, debootstrap and
    Debian's archive). A build goes to a temporary directory first, so an interrupted build
    never looks finished."""
    found = cached_tree(release)
    if found:
        return found
    if shutil.which("debootstrap") is None:
        raise RootfsError(
            "debootstrap is not installed: run `bash .ci/setup` (apt-get install debootstrap)"
        )
    if os.geteuid() != 0:
        raise RootfsError("building a Debian tree needs root (debootstrap)")
    entry = tree_path(release).parent
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = entry.parent / f".build-{entry.name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        build(release, work / "tree", log)
        shutil.rmtree(entry, ignore_errors=True)
        (work / "recipe.json").write_text(json.dumps(recipe(release), indent=1, sort_keys=True))
        (work / "complete").write_text("ok\n")
        work.rename(entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tree_path(release)


def build(release: str, target: Path, log=sys.stderr) -> None:
    """debootstrap into ``target`` and trim it."""
    argv = [*recipe(release)["command"], str(target), MIRROR]
    print(f"sim.rootfs: {' '.join(argv)}", file=log, flush=True)
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).splitlines()[-15:])
        raise RootfsError(f"debootstrap {release} failed (exit {p.returncode}):\n{tail}")
    trim(target)


def trim(target: Path) -> None:
    """Remove what a container never reads: apt lists, docs, man pages, locales, .deb files."""
    for rel in TRIM:
        path = target / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
            path.mkdir(mode=0o755)
        elif path.exists() or path.is_symlink():
            path.unlink()
    (target / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)


def python_version(tree: Path) -> str | None:
    """X.Y of the tree's system python3 (from its /usr/bin/python3 link, not by running it).

    >>> import tempfile; d = Path(tempfile.mkdtemp()); (d / "usr/bin").mkdir(parents=True)
    >>> (d / "usr/bin/python3").symlink_to("python3.13"); python_version(d)
    '3.13'
    """
    try:
        target = os.readlink(tree / "usr/bin/python3")
    except OSError:
        return None
    name = target.rsplit("/", 1)[-1]
    return name[len("python") :] if name.startswith("python3.") else None


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] not in ("build", "path"):
        print(__doc__.splitlines()[2:4], file=sys.stderr)
        return 2
    cmd, release = args
    try:
        tree = ensure_tree(release) if cmd == "build" else cached_tree(release)
    except RootfsError as e:
        print(f"sim.rootfs: {e}", file=sys.stderr)
        return 1
    if tree is None:
        print(
            f"sim.rootfs: no {release} tree built for the current recipe "
            f"({tree_path(release)}): run `python -m sim.rootfs build {release}`",
            file=sys.stderr,
        )
        return 1
    print(tree)
    return 0


if __name__ == "__main__":
    sys.exit(main())
