"""A container's processes as one tree, and which groups of them are trainings: pure functions
over the node probe's process list (:func:`pvegpu.probes.ct_processes.container_processes`: node
pid, ppid, session, state, argv, cwd as the container names it, cgroup).

A training is a group, not a command line: the processes that hold a GPU or run the training
script (however it is named: absolute, relative to the process's cwd, after a launcher or a
``python -u``), with the ancestors that launched them (torchrun, ``python -m
torch.distributed.run``, accelerate, deepspeed, a ``bash run.sh`` loop) up to what only started
them (the container's init, a login shell, sshd, cron, tmux), and everything below those.

>>> procs = [
...     {"pid": 10, "ppid": 1, "sid": 10, "argv": ["-bash"], "cwd": "/root", "ct_pid": 5},
...     {"pid": 11, "ppid": 10, "sid": 10, "argv": ["/root/venv/bin/python",
...      "/root/venv/bin/torchrun", "--nproc_per_node=2", "train.py"], "cwd": "/data/dflash"},
...     {"pid": 12, "ppid": 11, "sid": 12, "argv": ["/root/venv/bin/python", "-u", "train.py"],
...      "cwd": "/data/dflash"},
...     {"pid": 13, "ppid": 11, "sid": 13, "argv": ["/root/venv/bin/python", "-u", "train.py"],
...      "cwd": "/data/dflash"}]
>>> [(g.root, g.members) for g in groups(procs, {12: (0,), 13: (1,)}, "/data/dflash/train.py")]
[(11, (11, 12, 13))]
"""

from __future__ import annotations

import os.path
import shlex
from dataclasses import dataclass, field

#: Programs that start a training without being part of it: the container's init, logins and
#: their shells' hosts, schedulers, terminal multiplexers (argv[0]'s name; "-bash" is a login
#: shell). A group's root is the highest ancestor below one of them.
STARTERS = frozenset(
    {
        "systemd",
        "init",
        "sshd",
        "sshd-session",
        "login",
        "agetty",
        "getty",
        "cron",
        "crond",
        "CRON",
        "anacron",
        "atd",
        "tmux",
        "screen",
        "SCREEN",
        "su",
        "sudo",
        "runuser",
        "dropbear",
        "lxc-attach",
        "nsenter",
        "dbus-daemon",
    }
)
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "ash"})
#: Notebook servers that start kernels (and, from one, a training) without being part of it:
#: a training launched from a notebook is its own process tree, the server and its other
#: kernels are not (program names, also run as ``python <venv>/bin/jupyter-lab``, and modules).
SERVERS = frozenset({"jupyter", "jupyter-lab", "jupyter-notebook", "jupyter-server"})
SERVER_MODULES = frozenset({"jupyter", "jupyterlab", "notebook", "jupyter_server"})
#: Launchers, by program name (a console script, also run as ``python <venv>/bin/torchrun``)
LAUNCHERS = frozenset({"torchrun", "accelerate", "deepspeed", "torch-distributed-run"})
#: ... and by module (``python -m torch.distributed.run``)
LAUNCHER_MODULES = frozenset(
    {
        "torch.distributed.run",
        "torch.distributed.launch",
        "accelerate.commands.launch",
        "accelerate.commands.accelerate_cli",
        "deepspeed.launcher.runner",
    }
)


def program(argv0: str) -> str:
    """argv[0]'s name as a starter or launcher is known by.

    >>> program("-bash"), program("/usr/sbin/cron"), program("tmux: server")
    ('bash', 'cron', 'tmux')
    >>> program("sshd: /usr/sbin/sshd -D [listener]"), program("")
    ('sshd', '')
    """
    # setproctitle'd names: "sshd: root@pts/0", "tmux: server"
    head = argv0.lstrip("-").split(":", 1)[0].split()
    return os.path.basename(head[0]) if head else ""


def is_starter(argv: list[str]) -> bool:
    """Whether a process only starts trainings (see :data:`STARTERS`): also an interactive shell
    (a shell with no script and no ``-c``).

    >>> is_starter(["-bash"]), is_starter(["/bin/bash", "run.sh"]), is_starter(["sh", "-c", "x"])
    (True, False, False)
    >>> is_starter(["/usr/sbin/sshd", "-D"]), is_starter(["bash", "-l"])
    (True, True)
    >>> is_starter(["/root/venv/bin/python", "/root/venv/bin/jupyter-lab", "--ip=0.0.0.0"])
    True
    """
    if not argv:
        return False
    name = program(argv[0])
    if name in STARTERS or runs_program(argv, SERVERS, SERVER_MODULES):
        return True
    if name in SHELLS:
        rest = [a for a in argv[1:] if a not in ("-i", "-l", "--login", "--noprofile")]
        return not rest
    return False


def resolve(path: str, cwd: str | None) -> str | None:
    """``path`` as an absolute, normalised path (relative ones against ``cwd``); None when it
    cannot be told (a relative path, cwd unknown).

    >>> resolve("train.py", "/data/dflash"), resolve("../t.py", "/data/x"), resolve("t", None)
    ('/data/dflash/train.py', '/data/t.py', None)
    """
    if not path.startswith("/"):
        if not cwd or not cwd.startswith("/"):
            return None
        path = os.path.join(cwd, path)
    return os.path.normpath(path)


def words(argv: list[str]) -> list[str]:
    """argv after argv[0], with each ``sh -c`` text split into its words too.

    >>> words(["sh", "-c", "cd /d && python train.py --x"])[-3:]
    ['python', 'train.py', '--x']
    """
    found = []
    for arg in argv[1:]:
        found.append(arg)
        if " " in arg:
            try:
                found += shlex.split(arg)
            except ValueError:
                found += arg.split()
    return found


def runs_script(argv: list[str], cwd: str | None, script: str | None) -> bool:
    """Whether a process runs ``script``: an argument after argv[0] that is the script, absolute
    or relative to the process's working directory (``python -u train.py``, ``torchrun ...
    train.py``, ``sh -c 'cd /d && python train.py'`` in /d ...).

    >>> runs_script(["python", "-u", "train.py"], "/data/dflash", "/data/dflash/train.py")
    True
    >>> runs_script(["python", "/data/dflash/train.py"], None, "/data/dflash/train.py")
    True
    >>> runs_script(["python", "eval.py"], "/data/dflash", "/data/dflash/train.py")
    False
    """
    if not script:
        return False
    for word in words(argv):
        if word.startswith("-") or not word.endswith(os.path.basename(script)):
            continue
        if resolve(word, cwd) == os.path.normpath(script):
            return True
    return False


def runs_program(argv: list[str], programs, modules) -> bool:
    """Whether ``argv`` runs one of ``programs`` (directly, or as ``python <venv>/bin/<name>``)
    or one of ``modules`` (``python -m <module>``).

    >>> runs_program(["python3", "-m", "notebook"], SERVERS, SERVER_MODULES)
    True
    """
    if not argv:
        return False
    if program(argv[0]) in programs:
        return True
    if not program(argv[0]).startswith("python"):
        return False
    args = argv[1:]
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args):
            return args[i + 1] in modules
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:] in modules
        if not arg.startswith("-"):
            return program(arg) in programs
    return False


def is_launcher(argv: list[str]) -> bool:
    """A launcher of training workers: torchrun, accelerate, deepspeed (run directly or as
    ``python <venv>/bin/torchrun``), or ``python -m torch.distributed.run`` and friends.

    >>> is_launcher(["/root/venv/bin/python", "/root/venv/bin/torchrun", "t.py"])
    True
    >>> is_launcher(["python3", "-m", "torch.distributed.run", "t.py"]), is_launcher(["python"])
    (True, False)
    """
    return runs_program(argv, LAUNCHERS, LAUNCHER_MODULES)


def training_like(proc: dict, script: str | None) -> bool:
    """A process that runs the training script or a launcher."""
    argv = proc.get("argv") or []
    return runs_script(argv, proc.get("cwd"), script) or is_launcher(argv)


@dataclass(frozen=True)
class Group:
    """One group of processes: its root (node pid), every member (root first, then by pid), the
    GPUs its members hold, whether any member runs the script or a launcher, and whether the
    root is the top of its cgroup (``top``: its parent is the container's init or outside it, so
    a unit whose cgroup it is runs the training itself, rather than only having started it)."""

    root: int
    members: tuple[int, ...]
    gpus: tuple[int, ...] = field(default=())
    training: bool = False
    top: bool = True


def _parents(procs: list[dict]) -> dict[int, dict]:
    return {int(p["pid"]): p for p in procs}


def _is_init(proc: dict) -> bool:
    return proc.get("ct_pid") == 1


def root_of(pid: int, by_pid: dict[int, dict]) -> tuple[int, bool]:
    """(the group root above process ``pid``, whether that root is the top of its cgroup): the
    highest ancestor in the same cgroup that is no starter (:func:`is_starter`) and not the
    container's init."""
    root = pid
    seen = {pid}
    while True:
        parent = by_pid.get(int(by_pid[root].get("ppid") or 0))
        if parent is None or _is_init(parent):
            return root, True
        if (parent.get("cgroup") or "") != (by_pid[root].get("cgroup") or ""):
            return root, True
        if is_starter(parent.get("argv") or []) or int(parent["pid"]) in seen:
            return root, False
        root = int(parent["pid"])
        seen.add(root)


def descendants(root: int, procs: list[dict]) -> list[int]:
    """``root`` and every process below it (by ppid), root first, then by pid."""
    children: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(int(p.get("ppid") or 0), []).append(int(p["pid"]))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.append(pid)
        todo += children.get(pid, [])
    return [root, *sorted(found[1:])]


def groups(procs: list[dict], held: dict[int, tuple[int, ...]], script: str | None) -> list[Group]:
    """The groups of ``procs`` (one container's) that hold a GPU (``held``: node pid -> GPU
    indexes) or run the training script or a launcher, by root pid. A group below another
    group's root is part of it."""
    by_pid = _parents(procs)
    seeds = [
        int(p["pid"])
        for p in procs
        if not _is_init(p) and (int(p["pid"]) in held or training_like(p, script))
    ]
    roots: dict[int, bool] = {}
    for seed in seeds:
        root, top = root_of(seed, by_pid)
        roots[root] = roots.get(root, True) and top
    found: list[Group] = []
    claimed: set[int] = set()
    for root in sorted(roots, key=lambda r: len(_ancestors(r, by_pid))):
        if root in claimed:
            continue
        members = descendants(root, procs)
        claimed.update(members)
        gpus = sorted({g for m in members for g in held.get(m, ())})
        training = any(training_like(by_pid[m], script) for m in members if m in by_pid)
        found.append(Group(root, tuple(members), tuple(gpus), training, roots[root]))
    return sorted(found, key=lambda g: g.root)


def _ancestors(pid: int, by_pid: dict[int, dict]) -> list[int]:
    chain, seen = [], {pid}
    parent = by_pid.get(int(by_pid[pid].get("ppid") or 0))
    while parent is not None and int(parent["pid"]) not in seen:
        chain.append(int(parent["pid"]))
        seen.add(int(parent["pid"]))
        parent = by_pid.get(int(parent.get("ppid") or 0))
    return chain
