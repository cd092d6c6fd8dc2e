"""The ``lxc`` passthrough mode: raw ``lxc.*`` lines in the container's config file (pure).

`pct set` cannot write ``lxc.*`` keys, so on nodes without ``devN`` entries (pve-container < 5.0.7)
pvegpu edits the config file: one ``lxc.cgroup2.devices.allow`` per major and one
``lxc.mount.entry ... bind,optional,create=file`` per device node, with majors read from the node's
/proc/devices. Only the lines pvegpu owns are replaced; everything else, snapshots included, is
kept byte for byte.

>>> is_our_raw_line("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind", {})
True
"""

from __future__ import annotations

import re

DEV_KEY = re.compile(r"^dev(\d+)$")


def raw_lxc_lines(paths: list[str], node_devices: dict, majors: dict) -> list[tuple[str, str]]:
    """The ``lxc.*`` lines passing ``paths``: one cgroup allow per major, one bind per node.

    >>> raw_lxc_lines(["/dev/nvidia0", "/dev/nvidia-uvm"],
    ...               {"/dev/nvidia0": {"major": 195, "minor": 0}},
    ...               {"nvidia": 195, "nvidia-uvm": 508})
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
    lines += [
        ("lxc.mount.entry", f"{p} {p.lstrip('/')} none bind,optional,create=file") for p in paths
    ]
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
    if drop_dev:
        rest = _drop_pending_dev(rest)
    out = kept + ([""] + rest if rest else [])
    return "\n".join(out) + "\n"


def _drop_pending_dev(rest: list[str]) -> list[str]:
    """Drop pending NVIDIA devN values (switching to lxc mode); an emptied [pve:pending] goes."""
    out: list[str] = []
    section = None
    start = 0
    for line in rest:
        if line.startswith("["):
            if section == "[pve:pending]" and not any(kept.strip() for kept in out[start + 1 :]):
                del out[start:]
            section = line.strip()
            start = len(out)
        elif section == "[pve:pending]":
            key, _, value = line.partition(":")
            if DEV_KEY.match(key.strip()) and value.strip().startswith("/dev/nvidia"):
                continue
        out.append(line)
    if section == "[pve:pending]" and not any(kept.strip() for kept in out[start + 1 :]):
        del out[start:]
    while out and not out[-1].strip():
        out.pop()
    while out and not out[0].strip():
        out.pop(0)
    return out


def raw_lines_match(raw: list, new_raw: list[tuple[str, str]], majors: dict) -> bool:
    ours = [(k, v) for k, v in raw if is_our_raw_line(k, v, majors)]
    return ours == list(new_raw)


def raw_bound_paths(raw: list) -> list[str]:
    """The NVIDIA device paths that raw ``lxc.mount.entry`` lines bind into the container (at
    the same path), in order, whoever wrote them.

    >>> raw_bound_paths([["lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,"
    ...                   "create=file"], ["lxc.mount.entry", "/tank /data none bind"]])
    ['/dev/nvidia0']
    """
    paths = []
    for key, value in raw:
        fields = value.split()
        if key != "lxc.mount.entry" or len(fields) < 4 or "bind" not in fields[3].split(","):
            continue
        if fields[0].startswith("/dev/nvidia") and fields[1].lstrip("/") == fields[0].lstrip("/"):
            paths.append(fields[0])
    return paths


def raw_allowed(raw: list) -> set[tuple[int, int | None]]:
    """(major, minor or None for ``*``) of every read-write ``lxc.cgroup2.devices.allow`` char
    line.

    >>> sorted(raw_allowed([["lxc.cgroup2.devices.allow", "c 195:* rwm"],
    ...                     ["lxc.cgroup2.devices.allow", "c 509:1 rw"]]), key=str)
    [(195, None), (509, 1)]
    """
    allowed: set[tuple[int, int | None]] = set()
    for key, value in raw:
        m = re.match(r"^c (\d+):(\d+|\*) ([rwm]+)$", value.strip())
        if key == "lxc.cgroup2.devices.allow" and m and {"r", "w"} <= set(m.group(3)):
            allowed.add((int(m.group(1)), None if m.group(2) == "*" else int(m.group(2))))
    return allowed


def raw_lines_cover(raw: list, numbers: dict[str, tuple[int, int] | None]) -> bool:
    """Whether raw lines (anyone's: the community guides' too) already give the container every
    device of ``numbers`` ({path: (major, minor) on the node}): each bound at its path and allowed
    read-write by the cgroup.

    >>> raw = [["lxc.cgroup2.devices.allow", "c 195:* rwm"],
    ...        ["lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"]]
    >>> raw_lines_cover(raw, {"/dev/nvidia0": (195, 0)})
    True
    >>> raw_lines_cover(raw, {"/dev/nvidia0": (195, 0), "/dev/nvidia-uvm": (509, 0)})
    False
    """
    bound, allowed = set(raw_bound_paths(raw)), raw_allowed(raw)
    for path, number in numbers.items():
        if path not in bound or number is None:
            return False
        if (number[0], None) not in allowed and tuple(number) not in allowed:
            return False
    return True
