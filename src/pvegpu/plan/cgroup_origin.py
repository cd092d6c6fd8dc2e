"""Where a container process was started, from its cgroup: which container it belongs to and
the unit it runs under (or "started by hand": a login session, tmux/screen, the container's
init). PVE puts a container's processes below ``/lxc/<vmid>/`` (``/lxc.payload.<vmid>/`` with
the newer layout); its own systemd nests units below that.
"""

from __future__ import annotations

import re

#: What started a process outside any unit of the container.
HAND = "started by hand"


def container_path(cgroup: str, vmid: int) -> str | None:
    """The cgroup path below container ``vmid`` of a process (``/ns/system.slice/x.service``), or
    None when the process is not this container's (another's, the node's, or gone: empty).

    >>> container_path("0::/lxc/200/ns/system.slice/train.service", 200)
    '/ns/system.slice/train.service'
    >>> container_path("0::/lxc/201/ns/init.scope", 200) is None
    True
    >>> container_path("0::/lxc.payload.200/system.slice/x.service", 200)
    '/system.slice/x.service'
    >>> container_path("", 200) is None
    True
    >>> container_path("4:memory:/lxc/200" + chr(10) + "0::/lxc/200/ns/system.slice/t.service", 200)
    '/ns/system.slice/t.service'
    """
    found = []
    for line in (cgroup or "").splitlines():
        path = line.strip().split(":", 2)[-1]
        if "/lxc.monitor" in path:
            continue
        m = re.search(rf"/lxc(?:\.payload)?[./]{vmid}(/.*|$)", path)
        if m:
            found.append(m.group(1))
    # cgroup v1 (hybrid): the container's systemd keeps its units in one hierarchy only
    return max(found, key=len) if found else None


def started_by(path: str) -> str:
    """The unit a process runs under, from its cgroup path in the container, or :data:`HAND`
    (a login session's scope, a user's own manager, tmux/screen, the container's init).

    >>> started_by("/ns/system.slice/train.service"), started_by("/ns/system.slice/cron.service")
    ('train.service', 'cron.service')
    >>> started_by("/ns/user.slice/user-0.slice/session-3.scope")
    'started by hand'
    >>> started_by("/ns/user.slice/user-0.slice/user@0.service/app.slice/tmux-spawn-1.scope")
    'started by hand'
    """
    for part in reversed([p for p in path.split("/") if p]):
        if part.endswith(".service"):
            return HAND if part.startswith("user@") else part
    return HAND


def started_how(path: str) -> str:
    """``started by hand`` or ``under <unit>``, from a cgroup path in the container.

    >>> started_how("/ns/system.slice/train.service"), started_how("/ns/init.scope")
    ('under train.service', 'started by hand')
    """
    by = started_by(path)
    return HAND if by == HAND else f"under {by}"
