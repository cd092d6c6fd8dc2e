"""How to start a training again that a takeover (or ``rebuild=container``'s graceful stop)
stopped: the one command a run that fails or is cut short afterwards names in its last line.

It repeats what the node saw as the stop began: the root's argv quoted as it ran, from the
directory it ran in, with the environment that decides where and how it runs (its GPUs, NCCL,
torch: ``probes/ct_processes.py`` ``kept_env``, never a secret), through the unit kind that ran
it (a unit file: ``systemctl enable --now``; a transient unit, which has none:
``systemd-run`` with the same name; a user's own manager: ``runuser`` + ``--user``). A venv the
run moved away from ``venv_path`` afterwards (a hand-made one moved aside, a link pointed at
another build) is named where it is now (``moved``).

>>> h = RestartHint(200, "python t.py", ("/root/venv/bin/python", "t.py"), "/data",
...                 (("CUDA_VISIBLE_DEVICES", "0,1"),))
>>> h.text()[:78]
"pct exec 200 -- sh -c 'cd /data && CUDA_VISIBLE_DEVICES=0,1 nohup /root/venv/b"
>>> "/root/venv.pre-pvegpu.9/bin/python" in h.text({"/root/venv": "/root/venv.pre-pvegpu.9"})
True
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class RestartHint:
    """A stopped training, as the node saw it when its stop began (see the module)."""

    vmid: int
    command: str  # its command's text, when its argv could not be read
    argv: tuple[str, ...] | None = None
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    unit: str | None = None  # the unit that is the training (None: a process tree)
    uid: int | None = None  # the user whose own manager runs ``unit`` (None: the system's)
    transient: bool = False  # ``unit`` has no unit file (systemd-run)

    def text(self, moved: dict[str, str] | None = None) -> str:
        """The command, with the venvs in ``moved`` ({old path: where it is now}) renamed.

        >>> RestartHint(200, "x", unit="t.service").text()
        'pct exec 200 -- systemctl enable --now t.service'
        >>> RestartHint(200, "x", ("python", "t.py"), "/d", unit="t.service",
        ...             transient=True).text().split("exec ")[-1]
        "systemd-run --unit=t.service --working-directory=/d -- python t.py'"
        """
        argv = [relocated(a, moved) for a in self.argv] if self.argv else None
        env = [(k, relocated(v, moved)) for k, v in self.env]
        if not self.unit:
            command = shlex.join(argv) if argv else self.command
            prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in env)
            inner = f"cd {shlex.quote(self.cwd or '/')} && {prefix}nohup {command}"
            return f"pct exec {self.vmid} -- sh -c {shlex.quote(inner + ' >/dev/null 2>&1 &')}"
        user = ["--user"] if self.uid is not None else []
        if not self.transient:
            script = shlex.join(["systemctl", *user, "enable", "--now", self.unit])
            if self.uid is None:
                return f"pct exec {self.vmid} -- {script}"
        else:
            # a failed transient unit stays loaded, and systemd-run refuses its name until then
            script = f"systemctl {' '.join(user + ['reset-failed'])} {shlex.quote(self.unit)} "
            script += "2>/dev/null; exec " + shlex.join(
                ["systemd-run", *user, f"--unit={self.unit}"]
                + [f"--working-directory={self.cwd or '/'}"]
                + [f"--setenv={k}={v}" for k, v in env]
                + ["--", *(argv or shlex.split(self.command))]
            )
        if self.uid is not None:
            # a user's manager: as that user, with the runtime dir systemctl --user finds it by
            run = script if not self.transient else f"sh -c {shlex.quote(script)}"
            script = (
                f'u=$(getent passwd {int(self.uid)} | cut -d: -f1) && exec runuser -u "$u" -- '
                f"env XDG_RUNTIME_DIR=/run/user/{int(self.uid)} {run}"
            )
        return f"pct exec {self.vmid} -- sh -c {shlex.quote(script)}"


def relocated(value: str, moved: dict[str, str] | None) -> str:
    """``value`` (a path, or a PATH-like list) with each path under an old location in
    ``moved`` renamed to where it is now.

    >>> relocated("/root/venv/bin:/usr/bin", {"/root/venv": "/root/venv.old"})
    '/root/venv.old/bin:/usr/bin'
    >>> relocated("/root/venvs/x", {"/root/venv": "/elsewhere"})
    '/root/venvs/x'
    """
    if not moved:
        return value
    parts = value.split(":")
    for i, part in enumerate(parts):
        for old, new in moved.items():
            if part == old or part.startswith(old.rstrip("/") + "/"):
                parts[i] = new.rstrip("/") + part[len(old.rstrip("/")) :]
                break
    return ":".join(parts)


def restart_hint(vmid: int, trainer, procs: list[dict], uid: int | None, live: dict | None):
    """The :class:`RestartHint` of ``trainer`` from the node's read: its root process in
    ``procs`` (argv, cwd, environment), ``uid`` (:func:`pvegpu.plan.takeover.unit_uid`) and the
    container's view ``live`` (which units are transient).

    >>> from pvegpu.plan.running_training import Trainer, HAND
    >>> restart_hint(200, Trainer(2, "torchrun t.py", HAND), [], None, None).text()
    "pct exec 200 -- sh -c 'cd / && nohup torchrun t.py >/dev/null 2>&1 &'"
    """
    root: dict = next((p for p in procs if p.get("pid") == trainer.pid), {})
    argv = root.get("argv")
    uid = uid if trainer.unit else None
    transient = [trainer.unit, uid] in ((live or {}).get("transient") or [])
    return RestartHint(
        vmid,
        trainer.command,
        tuple(argv) if argv else None,
        root.get("cwd"),
        tuple(sorted((root.get("env") or {}).items())),
        trainer.unit,
        uid,
        transient,
    )


def hint_texts(run, node: str) -> list[str]:
    """The restart hints of ``node``'s stopped trainings (``run``: the run's context, its
    ``taken_over`` and ``venv_moved``), each naming its venv where it is now.

    >>> from types import SimpleNamespace as NS
    >>> run = NS(taken_over={"pve": [RestartHint(200, "x", unit="t.service")]}, venv_moved={})
    >>> hint_texts(run, "pve")
    ['pct exec 200 -- systemctl enable --now t.service']
    """
    moved = getattr(run, "venv_moved", None) or {}
    hints = (getattr(run, "taken_over", None) or {}).get(node) or []
    return [h.text(moved.get((node, h.vmid))) for h in hints]
