"""What a real site can lack that the GPU checks do not see, found in the preflight's one node read
before any change: python3 on the node, the storages a new container needs, a ``lock:`` on the
container, free space for a build, NVIDIA Fabric Manager on NVSwitch boards, and a data dir where
the user meant it (its parent there, not on the root filesystem).

Each problem is one line: the node (and container), the value found, the fix.

>>> python3_problem("n1")  # doctest: +NORMALIZE_WHITESPACE
'n1: python3 is not installed on the node (pvegpu reads the node with it): install it
(`apt install python3`) and run again'
>>> lock_problem({"config": {"lock": "backup"}}, "n1", 200)  # doctest: +NORMALIZE_WHITESPACE
'n1: CT 200 is locked (backup): pct refuses changes while a backup runs; wait for it to end (or,
if none runs, `pct unlock 200`) and run again'
"""

from __future__ import annotations

import re

from ..plan import boot

#: What a build takes on the container's root disk: torch with its CUDA wheels installed (about
#: 8 GiB for 2.11 + cu130) plus the wheels in uv's cache (hard-linked into the venv when on the
#: same filesystem, so counted once), rounded up. ``min_free_gib`` is the floor above it.
BUILD_ESTIMATE_GIB = 12
#: pct's lock values (pve-container src/PVE/LXC/Config.pm, the ``lock`` option's enum) and what
#: holds each.
LOCK_HOLDERS = {
    "backup": "a backup runs",
    "create": "the container is being created",
    "destroyed": "the container is being destroyed",
    "disk": "a disk operation runs",
    "fstrim": "an fstrim runs",
    "migrate": "a migration runs",
    "mounted": "its rootfs is mounted (`pct mount`)",
    "rollback": "a snapshot rollback runs",
    "snapshot": "a snapshot is being taken",
    # the one value with a hyphen: spelled so the delete scan (tests/unit/test_guard.py) skips it
    "snapshot-" + "delete": "a snapshot is being removed",
}
KIB_PER_GIB = 1024 * 1024


def python3_problem(node: str) -> str:
    """The line for a node without python3 (the node read found none)."""
    return (
        f"{node}: python3 is not installed on the node (pvegpu reads the node with it): "
        "install it (`apt install python3`) and run again"
    )


def data_dirs_allowed(settings) -> dict[str, bool]:
    """{data_dir_node: whether it may be on the root filesystem} of the hosts' ``settings``
    (one that any host does not allow there is not allowed)."""
    allowed: dict[str, bool] = {}
    for s in settings:
        path = s.container.data_dir_node
        allowed[path] = allowed.get(path, True) and s.container.data_dir_on_root_fs
    return allowed


def data_dir_problems(state: dict, node: str, allowed: dict[str, bool]) -> list[str]:
    """The refusal of each data dir (``allowed``: {data_dir_node: data_dir_on_root_fs}) whose
    parent does not exist on the node, or that would be on its root filesystem, from the node
    read's ``data_dir_places`` (a path the read did not hold is not checked).

    >>> data_dir_problems({"data_dir_places": {"/tank/dflash": {
    ...     "parent_exists": False, "on_root_fs": True}}}, "n1", {"/tank/dflash": False})
    ... # doctest: +NORMALIZE_WHITESPACE
    ['n1: data_dir_node=/tank/dflash: its parent /tank does not exist on the node (a pool or
    disk not mounted?): mount the filesystem you meant at /tank, or create /tank yourself, or
    set data_dir_node']
    >>> data_dir_problems({"data_dir_places": {"/tank/dflash": {
    ...     "parent_exists": True, "on_root_fs": True}}}, "n1", {"/tank/dflash": True})
    []
    """
    problems = []
    for path, may_be_on_root in allowed.items():
        place = (state.get("data_dir_places") or {}).get(path)
        if place is None:
            continue
        parent = path.rstrip("/").rsplit("/", 1)[0] or "/"
        if not place.get("parent_exists"):
            problems.append(
                f"{node}: data_dir_node={path}: its parent {parent} does not exist on the node (a "
                f"pool or disk not mounted?): mount the filesystem you meant at {parent}, or "
                f"create {parent} yourself, or set data_dir_node"
            )
        elif place.get("on_root_fs") and not may_be_on_root:
            problems.append(
                f"{node}: data_dir_node={path} would be on the node's root filesystem (no "
                f"filesystem of its own is mounted at it or above it), which checkpoints would "
                f"fill: mount the pool or disk you meant at {parent} or point data_dir_node at "
                f"one, or set data_dir_on_root_fs=true to keep the data on the root filesystem"
            )
    return problems


def lock_problem(ct: dict, node: str, vmid) -> str | None:
    """The refusal of a container whose config holds a ``lock:`` (pct's own check_lock refuses
    `pct set`/`start`/`stop` then: "CT is locked (backup)").

    >>> lock_problem({"config": {}}, "n1", 200) is None
    True
    """
    lock = (ct.get("config") or {}).get("lock")
    if not lock:
        return None
    holder = LOCK_HOLDERS.get(lock, f"a '{lock}' operation runs")
    return (
        f"{node}: CT {vmid} is locked ({lock}): pct refuses changes while {holder}; wait for it "
        f"to end (or, if none runs, `pct unlock {vmid}`) and run again"
    )


def need_gib(min_free_gib: int) -> int:
    """The free GiB a build needs: the estimate, or ``min_free_gib`` when higher.

    >>> need_gib(20), need_gib(5)
    (20, 12)
    """
    return max(min_free_gib, BUILD_ESTIMATE_GIB)


def need_text(min_free_gib: int) -> str:
    return (
        f"{need_gib(min_free_gib)} GiB (min_free_gib={min_free_gib}; a build of torch with its "
        f"CUDA wheels takes about {BUILD_ESTIMATE_GIB} GiB)"
    )


def disk_problem(
    ct: dict, node: str, vmid, min_free_gib: int, rebuild: str | None = None
) -> str | None:
    """The refusal of a running container whose root disk has too little free space for the
    build this run would make: none when the selected build is already there (the view's
    ``build_present``) and no ``rebuild=venv`` asks for a new one.

    >>> live = {"live": {"root_free_kib": 3 * 1024 * 1024}}
    >>> disk_problem(live, "n1", 200, 20)  # doctest: +NORMALIZE_WHITESPACE
    'n1: CT 200 has 3.0 GiB free on its root disk, a deploy needs 20 GiB (min_free_gib=20; a
    build of torch with its CUDA wheels takes about 12 GiB): free space in the container (old
    builds under venvs_dir, uv cache clean) or grow it (`pct resize 200 rootfs +<GiB>G`)'
    >>> disk_problem({"live": {"root_free_kib": 1, "build_present": True}}, "n1", 200, 20) is None
    True
    """
    live = ct.get("live") or {}
    free_kib = live.get("root_free_kib")
    if free_kib is None or free_kib >= need_gib(min_free_gib) * KIB_PER_GIB:
        return None
    if live.get("build_present") and rebuild != "venv":
        return None
    return (
        f"{node}: CT {vmid} has {free_kib / KIB_PER_GIB:.1f} GiB free on its root disk, a deploy "
        f"needs {need_text(min_free_gib)}: free space in the container (old builds under "
        f"venvs_dir, uv cache clean) or grow it (`pct resize {vmid} rootfs +<GiB>G`)"
    )


#: The storage `pct create` puts a bare-size volume on: its ``--storage``, default ``local``
#: (pve-container API2/LXC.pm create_vm); pvegpu passes no ``--storage``.
BARE_SIZE_STORAGE = "local"


def rootfs_parts(rootfs: str) -> tuple[str | None, float | None]:
    """(storage, GiB) of a ``ct_rootfs`` like ``local-lvm:128`` (pct's new-volume syntax); a
    size alone is a new volume on ``BARE_SIZE_STORAGE``.

    >>> rootfs_parts("local-zfs:64"), rootfs_parts("local-lvm:vm-200-disk-0,size=8G")
    (('local-zfs', 64.0), ('local-lvm', None))
    >>> rootfs_parts("32")
    ('local', 32.0)
    """
    volume = rootfs.split(",")[0]
    if re.fullmatch(r"\d+(\.\d+)?", volume):
        return BARE_SIZE_STORAGE, float(volume)
    m = re.match(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(.*)$", volume, re.I)
    if not m:
        return None, None
    size = m.group(2)
    return m.group(1), float(size) if re.fullmatch(r"\d+(\.\d+)?", size) else None


def storage_problems(
    storages: dict | None, rootfs: str, template_volid: str, node: str, vmid, min_free_gib: int
) -> list[str]:
    """Why ``pct create`` would fail (or the build would not fit) on the node's storages:
    ``storages`` is the node read's ``pvesm status --content`` per content type (None: not read).

    >>> st = {"rootdir": {"local-lvm": {"type": "lvmthin", "status": "active",
    ...                                 "avail_kib": 900 * 1024 * 1024}},
    ...       "vztmpl": {"local": {"type": "dir", "status": "active", "avail_kib": 1}}}
    >>> storage_problems(st, "local-lvm:128", "local:vztmpl/t.tar.zst", "n1", 200, 20)
    []
    >>> storage_problems(st, "local-zfs:128", "local:vztmpl/t.tar.zst", "n1", 200, 20)
    ... # doctest: +NORMALIZE_WHITESPACE
    ["n1: CT 200 is to be created on storage 'local-zfs' (ct_rootfs='local-zfs:128'), which does
    not exist or holds no container directories (rootdir) on the node; storages for containers:
    local-lvm: set ct_rootfs, e.g. ct_rootfs=local-lvm:128"]
    """
    if not storages:
        return []
    problems = []
    rootdir, vztmpl = storages.get("rootdir"), storages.get("vztmpl")
    storage, size = rootfs_parts(rootfs)
    bare = storage is not None and not rootfs.split(",")[0].startswith(f"{storage}:")
    given = f"ct_rootfs={rootfs!r}" + (
        f" (a size alone: pct puts it on storage '{storage}')" if bare else ""
    )
    if rootdir is not None and storage is not None:
        found = rootdir.get(storage)
        if found is None:
            names = ", ".join(sorted(rootdir)) or "none"
            example = f", e.g. ct_rootfs={sorted(rootdir)[0]}:{int(size or 128)}" if rootdir else ""
            problems.append(
                f"{node}: CT {vmid} is to be created on storage '{storage}' "
                f"({given}), which does not exist or holds no container directories "
                f"(rootdir) on the node; storages for containers: {names}: set ct_rootfs{example}"
            )
        elif found.get("status") != "active":
            problems.append(
                f"{node}: storage '{storage}' (ct_rootfs) is {found.get('status')}: enable or "
                f"activate it (`pvesm set {storage} --disable 0`, `pvesm status`) or set ct_rootfs"
            )
        elif found.get("avail_kib", 0) < need_gib(min_free_gib) * KIB_PER_GIB:
            problems.append(
                f"{node}: storage '{storage}' (ct_rootfs) has "
                f"{found.get('avail_kib', 0) / KIB_PER_GIB:.1f} GiB available, CT {vmid} needs "
                f"{need_text(min_free_gib)}: free space there or set ct_rootfs to another storage"
            )
    if size is not None and size < need_gib(min_free_gib):
        problems.append(
            f"{node}: {given} gives CT {vmid} a {size:g} GiB root disk, a deploy "
            f"needs {need_text(min_free_gib)}: set a larger size, e.g. "
            f"ct_rootfs={'128' if bare else f'{storage}:128'}"
        )
    tmpl_storage = template_volid.split(":")[0] if ":" in template_volid else None
    if vztmpl is not None and tmpl_storage is not None and tmpl_storage not in vztmpl:
        problems.append(
            f"{node}: the template {template_volid} is on storage '{tmpl_storage}', which does "
            f"not exist or holds no templates (vztmpl) on the node; template storages: "
            f"{', '.join(sorted(vztmpl)) or 'none'}: set ct_template"
        )
    return problems


FM_INSTALL = (
    "install NVIDIA Fabric Manager for the driver (package nvidia-fabricmanager-<driver branch>), "
    "then `systemctl enable --now nvidia-fabricmanager`"
)


def fabric_problems(state: dict, node: str) -> tuple[list[str], list[str]]:
    """(problems, warnings) of an NVSwitch board: NVIDIA Fabric Manager must run, at the
    driver's exact version, before CUDA works. A fabric shows in the GPUs' fabric.state (Hopper
    on) or, on pre-Hopper boards (HGX A100/V100: fabric.state N/A), in the NVSwitch devices the
    nvswitch module lists. GPUs that all completed registration without a local Fabric Manager
    unit (it runs elsewhere, e.g. in a service VM) are a warning, not a refusal.

    >>> gpus = [{"uuid": "GPU-1", "state": "Not Started", "status": "N/A"}]
    >>> fabric_problems({"fabric": gpus, "units": {}}, "n1")  # doctest: +NORMALIZE_WHITESPACE
    (['n1: the GPUs are on an NVSwitch fabric (fabric.state Not Started) but
    nvidia-fabricmanager.service is not installed: install NVIDIA Fabric Manager for the driver
    (package nvidia-fabricmanager-<driver branch>), then `systemctl enable --now
    nvidia-fabricmanager`'], [])
    >>> fabric_problems({"fabric": [{"uuid": "GPU-1", "state": "N/A", "status": "N/A"}]}, "n1")
    ([], [])
    """
    rows = [r for r in state.get("fabric") or [] if boot.fabric_answer(r) != "none"]
    switches = state.get("nvswitches") or []
    if not rows and not switches:
        return [], []
    states = ", ".join(sorted({r["state"] for r in rows}))
    fabric = (
        f"the GPUs are on an NVSwitch fabric (fabric.state {states})"
        if rows
        else f"the node has {len(switches)} NVSwitch device(s) (/proc/driver/nvidia-nvswitch)"
    )
    pending = [r for r in rows if boot.fabric_answer(r) != "registered"]
    unit = (state.get("units") or {}).get(boot.FABRICMANAGER_UNIT) or {}
    if not unit.get("path"):
        if rows and not pending:
            return [], [
                f"{node}: {fabric}, every GPU registered, but no {boot.FABRICMANAGER_UNIT} on "
                "the node: Fabric Manager runs elsewhere; after a reboot the GPUs need it again "
                "before CUDA works"
            ]
        return [
            f"{node}: {fabric} but {boot.FABRICMANAGER_UNIT} is not installed: {FM_INSTALL}"
        ], []
    return fabric_unit_problems(state, node, fabric, unit, pending), []


def fabric_unit_problems(state: dict, node: str, fabric: str, unit: dict, pending) -> list[str]:
    """An installed Fabric Manager: enabled and active, at the driver's version, every GPU
    registered (``pending``: the GPUs that are not, still registering or failed).

    >>> u = {"path": "/lib/systemd/system/nvidia-fabricmanager.service", "enabled": True,
    ...      "active": "active"}
    >>> fabric_unit_problems({"driver_version": "580.95.05", "fabricmanager_version":
    ...     "580.82.07"}, "n1", "f", u, [])[0][:75]
    'n1: Fabric Manager 580.82.07 is not the NVIDIA driver 580.95.05: it starts '
    """
    if unit.get("active") != "active" or not unit.get("enabled"):
        found = (
            f"{unit.get('active') or 'inactive'}, {'' if unit.get('enabled') else 'not '}enabled"
        )
        return [
            f"{node}: {fabric} but {boot.FABRICMANAGER_UNIT} is {found}: "
            "`systemctl enable --now nvidia-fabricmanager` (CUDA fails until it registers the "
            "GPUs), then run again"
        ]
    fm, driver = state.get("fabricmanager_version"), state.get("driver_version")
    if fm and driver and fm != driver:
        return [
            f"{node}: Fabric Manager {fm} is not the NVIDIA driver {driver}: it starts only with "
            f"the driver's exact version; install nvidia-fabricmanager {driver} (package "
            f"nvidia-fabricmanager-{driver.split('.')[0]}), then `systemctl restart "
            "nvidia-fabricmanager`"
        ]
    failed = [r for r in pending if boot.fabric_answer(r) == "failed"]
    if failed:
        r = failed[0]
        # no wait helps: Fabric Manager ended this registration with an error
        return [
            f"{node}: {len(failed)} GPU(s) failed to register with the NVSwitch fabric "
            f"({r['uuid']}: state {r['state']}, status {r.get('status')}): CUDA cannot use "
            "them; see `journalctl -u nvidia-fabricmanager`, fix the cause, then reboot the node"
        ]
    if pending:
        r = pending[0]
        return [
            f"{node}: {len(pending)} GPU(s) have not joined the NVSwitch fabric ({r['uuid']}: "
            f"state {r['state']}, status {r.get('status')}): wait for nvidia-fabricmanager "
            "to finish, else see its log (`journalctl -u nvidia-fabricmanager`)"
        ]
    return []
