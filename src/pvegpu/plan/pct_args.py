"""The arguments of `pct create` and `pct set` for the container settings, and what a change of
them means (a lowering, a resize, a memory limit under use): pure, from the container's config
(/etc/pve/lxc/<vmid>.conf as the node probe parsed it).

>>> lowered({"cores": "32", "memory": "262144"}, ["--cores", "16", "--memory", "262144"])
['cores']
"""

from __future__ import annotations

from ..settings import ContainerSettings
from .adoption import TAG


def mount_spec(container: ContainerSettings) -> str:
    """The data mount point: a node directory bind-mounted into the container. ``backup=0``:
    vzdump leaves it out (checkpoints and datasets are backed up on their own schedule)."""
    return f"{container.data_dir_node},mp={container.data_dir_ct},backup=0"


def create_args(container: ContainerSettings, vmid: int, template: str) -> list[str]:
    """`pct create` argv. ``--unprivileged`` is always explicit: its default flipped in PVE 9
    (pve-container 6, "api: create: default to unprivileged containers")."""
    return [
        "pct",
        "create",
        str(vmid),
        template,
        "--hostname",
        container.hostname,
        "--cores",
        str(container.cores),
        "--memory",
        str(container.memory_mib),
        "--swap",
        str(container.swap_mib),
        "--rootfs",
        container.rootfs,
        "--net0",
        container.net0,
        "--unprivileged",
        "1" if container.unprivileged else "0",
        "--features",
        container.features,
        "--mp0",
        mount_spec(container),
        "--onboot",
        "1" if container.onboot else "0",
        "--protection",
        "1" if container.protection else "0",
        "--ostype",
        "debian",
        # pvegpu's mark (shown beside the name in the web UI): a container without it was not
        # made by pvegpu, which then changes it only with --data adopt=true
        "--tags",
        TAG,
    ]


def parse_mount(value: str) -> tuple[str, dict]:
    """``(source, options)`` of an mpN value (a Proxmox property string)."""
    parts = value.split(",")
    return parts[0].rstrip("/"), dict(p.split("=", 1) for p in parts[1:] if "=" in p)


def data_mount_key(config: dict, container: ContainerSettings) -> str | None:
    """The one mpN entry that is the data mount: a bind mount (node path source) of
    ``data_dir_node`` or at ``data_dir_ct``. When either setting changes, this entry is edited,
    never a second one added beside it.

    >>> from pvegpu.settings import Settings, defaults
    >>> data_mount_key({"mp0": "local-lvm:vm-200-disk-1,mp=/data", "mp3": "/tank/dflash,mp=/old"},
    ...                Settings.from_data(defaults()).container)
    'mp3'
    """
    mps = sorted((int(k[2:]), k) for k in config if k.startswith("mp") and k[2:].isdigit())
    for _, key in mps:
        source, opts = parse_mount(config[key])
        if source.startswith("/") and (
            source == container.data_dir_node.rstrip("/")
            or opts.get("mp", "").rstrip("/") == container.data_dir_ct
        ):
            return key
    return None


def data_mount_current(config: dict, key: str | None, container: ContainerSettings) -> bool:
    """The data mount entry mounts ``data_dir_node`` at ``data_dir_ct``."""
    if key is None:
        return False
    source, opts = parse_mount(config[key])
    target = opts.get("mp", "").rstrip("/")
    return source == container.data_dir_node and target == container.data_dir_ct


#: What pct takes for a key a container's config does not name (pve-container's defaults).
SET_DEFAULTS = {"onboot": "0", "swap": "512", "memory": "512"}


def settings_args(config: dict, container: ContainerSettings) -> list[str]:
    """`pct set` args converging an existing container's hotpluggable settings: cores, memory,
    swap, onboot, the data mount, and protection (only ever raised here: only rebuild=container
    lifts it). Hostname, network, features and the root disk are left as created.

    >>> from pvegpu.settings import Settings, defaults
    >>> s = Settings.from_data(defaults()).container
    >>> settings_args({"cores": "32", "memory": "262144", "swap": "0", "onboot": "1",
    ...                "protection": "1", "mp0": "/tank/dflash,mp=/data,backup=0"}, s)
    []
    >>> settings_args({"cores": "8", "memory": "262144", "swap": "0", "onboot": "1",
    ...                "mp0": "local-lvm:vm-200-disk-1,mp=/scratch"}, s)
    ['--cores', '32', '--protection', '1', '--mp1', '/tank/dflash,mp=/data,backup=0']
    """
    args: list[str] = []
    want = {
        "cores": str(container.cores),
        "memory": str(container.memory_mib),
        "swap": str(container.swap_mib),
        "onboot": "1" if container.onboot else "0",
    }
    for key, value in want.items():
        if config.get(key, SET_DEFAULTS.get(key)) != value:
            args += [f"--{key}", value]
    if container.protection and config.get("protection") != "1":
        args += ["--protection", "1"]
    mp = data_mount_key(config, container)
    if not data_mount_current(config, mp, container):
        mp = mp or f"mp{next(n for n in range(256) if f'mp{n}' not in config)}"
        args += [f"--{mp}", mount_spec(container)]
    return args


# --- node ---------------------------------------------------------------------------------------


LOWERABLE = ("cores", "memory", "swap")
MIB = 1024 * 1024


def lowered(config: dict, args: list[str]) -> list[str]:
    """The resources ``args`` (`pct set` args) lower against ``config``: cores, memory, swap.

    >>> lowered({"cores": "16", "memory": "131072", "swap": "512"},
    ...         ["--cores", "32", "--memory", "262144", "--swap", "0"])
    ['swap']
    """
    pairs = dict(zip(args[::2], args[1::2]))
    defaults = {"swap": "512", "memory": "512", "cores": "0"}
    found = []
    for key in LOWERABLE:
        want, have = pairs.get(f"--{key}"), config.get(key, defaults[key])
        if want is not None and have.isdigit() and (int(have) == 0 or int(want) < int(have)):
            found.append(key)
    return found


def resized(args: list[str]) -> list[str]:
    """The resources (cores, memory, swap) ``args`` (`pct set` args) set.

    >>> resized(["--cores", "32", "--onboot", "1"])
    ['cores']
    """
    return [key for key in LOWERABLE if f"--{key}" in args[::2]]


def without(args: list[str], keys: list[str]) -> list[str]:
    """``args`` (`pct set` args, flag-value pairs) without the flags of ``keys``.

    >>> without(["--cores", "32", "--swap", "0"], ["swap"])
    ['--cores', '32']
    """
    pairs = list(zip(args[::2], args[1::2]))
    return [x for flag, value in pairs if flag[2:] not in keys for x in (flag, value)]


def memory_below_use(
    vmid: int, memory_mib: int, used: int | None, cgroup: str | None = "v2"
) -> str | None:
    """The refusal of a memory limit under what the container uses now: cgroup v2 takes
    memory.max without a check, then the kernel reclaims and OOM-kills inside the container;
    cgroup v1 (``cgroup="v1"``) reclaims what it can and then refuses the limit (EBUSY), so
    `pct set` fails.

    >>> memory_below_use(200, 1024, 3 * 1024 ** 3)[:60]
    'CT 200 uses 3072 MiB of memory now: ct_memory_mib=1024 would'
    """
    if used is None or memory_mib * MIB >= used:
        return None
    effect = (
        "make `pct set` fail (cgroup v1 refuses a limit below use, EBUSY, after reclaiming "
        "what it can)"
        if cgroup == "v1"
        else "have the kernel reclaim and OOM-kill in it"
    )
    return (
        f"CT {vmid} uses {used // MIB} MiB of memory now: ct_memory_mib={memory_mib} would "
        f"{effect}; set ct_memory_mib >= {-(-used // MIB)} (or free memory in the container "
        "first)"
    )
