"""Ending what a test started on this machine, and nothing else.

A teardown that signals a pid or a process group it recorded earlier (a worker's pid from its
start file, a helper's from its parent's) may hit a stranger once that process has exited: the
kernel hands a freed pid out again when its counter wraps (``pid_max`` is 32768 on CI's
machines, and the suite, run with ``-n 4`` as root, goes through that quickly), and every
test's processes share this machine's pid space, a simulated node's included (its processes
have a pid here too). ``os.killpg`` of a reused pid SIGKILLs whatever session now leads that
group: an ssh session's command on a neighbour test's node (a takeover's stop, say).

So a teardown signals only processes that prove to be its own: their command line names the
test's own ``tmp_path`` (an argument that is that path or lies under it: what the test started,
and the helpers they forked, which keep their parent's argv). Each one through a pidfd opened
before its command line is read, so a pid freed and handed out again between the read and the
signal is never signalled.

>>> ours(["python3", "/tmp/t0/worker.py"], "/tmp/t0"), ours(["sleep", "/tmp/t01"], "/tmp/t0")
(True, False)
"""

from __future__ import annotations

import errno
import os
import signal


def ours(argv: list[str], marker: str) -> bool:
    """Whether an argv names ``marker`` (a test's tmp path) or a path under it."""
    top = marker.rstrip("/")
    return any(a == top or a.startswith(top + "/") for a in argv)


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def signal_if_ours(pid: int, marker: str, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to ``pid`` only while it is a process whose argv names ``marker``; whether
    it was sent. The pidfd pins the process before its argv is read: if it exits and its pid is
    reused meanwhile, the read is the stranger's and the signal goes nowhere."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError as e:
        if e.errno != errno.ENOSYS:
            return False
        fd = None  # a kernel before 5.3: the check and the kill stay apart (a rare race)
    try:
        if not ours(_argv(pid), marker):
            return False
        if fd is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


def kill_ours(marker: str, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` (SIGKILL) to every process of this machine whose argv names ``marker``, this
    process left out; the pids signalled. What a teardown calls instead of ``os.kill`` or
    ``os.killpg`` of pids it recorded."""
    top = os.path.normpath(marker)
    if not os.path.isabs(top) or top.count("/") < 3:  # "/", "/tmp": every process would match
        raise ValueError(f"kill_ours needs a test's own tmp path, not {marker!r}")
    me = os.getpid()
    return [
        int(name)
        for name in os.listdir("/proc")
        if name.isdigit() and int(name) != me and signal_if_ours(int(name), marker, sig)
    ]
