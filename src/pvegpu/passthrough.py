"""Which NVIDIA device nodes a training container needs, and the config lines that pass them.

Two modes, chosen by what the node supports:

- ``dev``: ``devN: /dev/nvidia0`` entries (pve-container >= 5.0.7, PVE 8.2+), set with `pct set`;
  Proxmox re-reads each node's major:minor at every container start.
- ``lxc``: raw ``lxc.cgroup2.devices.allow`` + ``lxc.mount.entry ... bind,optional,create=file``
  lines for older nodes, with majors read from the node's /proc/devices (uvm and caps majors are
  dynamic). `pct set` cannot write ``lxc.*`` keys, so these lines are edited in the config file.

>>> wanted_devices({"/dev/nvidia0": {}, "/dev/nvidiactl": {}, "/dev/nvidia-uvm": {},
...                 "/dev/nvidia-uvm-tools": {}, "/dev/nvidia-modeset": {}}, ())
['/dev/nvidia0', '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools']
"""

from __future__ import annotations

import re

GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")
CORE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
DEV_KEY = re.compile(r"^dev(\d+)$")


def wanted_devices(node_devices: dict, extras: tuple[str, ...] | list[str], gpu_count: int | None = None) -> list[str]:
    """Device paths to pass: every GPU node (by minor), the control/uvm nodes, chosen extras.

    The uvm nodes are wanted even when missing on the node (they appear after nvidia-modprobe).
    """
    gpus = sorted(
        (p for p in node_devices if GPU_NODE.match(p)), key=lambda p: int(GPU_NODE.match(p).group(1))
    )
    paths = gpus + list(CORE_NODES)
    if "nvidia-modeset" in extras:
        paths.append("/dev/nvidia-modeset")
    if "nvidia-caps" in extras:
        paths += sorted(p for p in node_devices if p.startswith("/dev/nvidia-caps/"))
    return paths


def current_dev_entries(config: dict) -> dict[int, str]:
    """``{N: path}`` of the devN entries in a parsed container config."""
    entries = {}
    for key, value in config.items():
        m = DEV_KEY.match(key)
        if m:
            entries[int(m.group(1))] = value.split(",")[0]
    return entries


def dev_set_args(config: dict, paths: list[str]) -> list[str]:
    """`pct set` arguments that make the devN entries exactly ``paths`` ([] when they already are).

    Non-NVIDIA devN entries are kept; NVIDIA ones not wanted any more are deleted.

    >>> dev_set_args({"dev0": "/dev/nvidia0"}, ["/dev/nvidia0", "/dev/nvidiactl"])
    ['--dev1', '/dev/nvidiactl']
    >>> dev_set_args({"dev0": "/dev/nvidia0", "dev1": "/dev/nvidia1"}, ["/dev/nvidia0"])
    ['--delete', 'dev1']
    """
    current = current_dev_entries(config)
    ours = {n: p for n, p in current.items() if p.startswith("/dev/nvidia")}
    if sorted(ours.values()) == sorted(paths) and len(ours) == len(paths):
        return []
    foreign = {n for n, p in current.items() if n not in ours}
    free = (n for n in range(0, 256) if n not in foreign)
    args: list[str] = []
    target: dict[int, str] = {}
    for path in paths:
        target[next(free)] = path
    for n, path in sorted(target.items()):
        if current.get(n) != path:
            args += [f"--dev{n}", path]
    stale = sorted(n for n in ours if n not in target)
    if stale:
        args += ["--delete", ",".join(f"dev{n}" for n in stale)]
    return args


def raw_lxc_lines(paths: list[str], node_devices: dict, majors: dict) -> list[tuple[str, str]]:
    """The ``lxc.*`` lines passing ``paths``: one cgroup allow per major, one bind per node.

    >>> raw_lxc_lines(["/dev/nvidia0", "/dev/nvidia-uvm"],
    ...               {"/dev/nvidia0": {"major": 195, "minor": 0}}, {"nvidia": 195, "nvidia-uvm": 508})
    ... # doctest: +NORMALIZE_WHITESPACE
    [('lxc.cgroup2.devices.allow', 'c 195:* rwm'), ('lxc.cgroup2.devices.allow', 'c 508:* rwm'),
     ('lxc.mount.entry', '/dev/nvidia0 dev/nvidia0 none bind,optional,create=file'),
     ('lxc.mount.entry', '/dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file')]
    """
    wanted_majors = []
    for path in paths:
        major = _major_for(path, node_devices, majors)
        if major is not None and major not in wanted_majors:
            wanted_majors.append(major)
    lines = [("lxc.cgroup2.devices.allow", f"c {m}:* rwm") for m in wanted_majors]
    lines += [("lxc.mount.entry", f"{p} {p.lstrip('/')} none bind,optional,create=file") for p in paths]
    return lines


def _major_for(path: str, node_devices: dict, majors: dict) -> int | None:
    if path in node_devices and "major" in node_devices[path]:
        return node_devices[path]["major"]
    if path.startswith("/dev/nvidia-uvm"):
        return majors.get("nvidia-uvm")
    if path.startswith("/dev/nvidia-caps"):
        return majors.get("nvidia-caps")
    return majors.get("nvidia")


def is_our_raw_line(key: str, value: str, majors: dict) -> bool:
    """Raw lines pvegpu manages: NVIDIA binds, and allows for majors not owned by other drivers.

    An allow line for a major that /proc/devices no longer lists (a stale uvm major) is ours too.
    ``majors`` is every character major of the node (/proc/devices), by driver name.
    """
    if key == "lxc.mount.entry":
        return value.startswith("/dev/nvidia")
    if key == "lxc.cgroup2.devices.allow":
        m = re.match(r"^c (\d+):\* rwm$", value)
        if not m:
            return False
        major = int(m.group(1))
        owner = next((name for name, num in majors.items() if num == major), None)
        return owner is None or owner.startswith("nvidia")
    return False


def rewrite_config(text: str, new_raw: list[tuple[str, str]], majors: dict, drop_dev: bool) -> str:
    """The config text with our raw lines replaced by ``new_raw`` (and NVIDIA devN dropped when
    switching to lxc mode); everything else, snapshots included, kept byte for byte."""
    lines = text.splitlines()
    end = next((i for i, line in enumerate(lines) if line.startswith("[")), len(lines))
    main, rest = lines[:end], lines[end:]
    kept = []
    for line in main:
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key.startswith("lxc.") and is_our_raw_line(key, value, majors):
            continue
        if drop_dev and DEV_KEY.match(key) and value.startswith("/dev/nvidia"):
            continue
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    kept += [f"{k}: {v}" for k, v in new_raw]
    out = kept + ([""] + rest if rest else [])
    return "\n".join(out) + "\n"


def raw_lines_match(raw: list, new_raw: list[tuple[str, str]], majors: dict) -> bool:
    ours = [(k, v) for k, v in raw if is_our_raw_line(k, v, majors)]
    return ours == list(new_raw)
