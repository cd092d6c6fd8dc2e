"""Where the venv switch leaves what was at ``venv_path``: a venv made by hand moved aside (named
with its size first, kept: pvegpu never deletes it), or the build the link pointed at. Both are
recorded, so a restart hint of a training that ran from ``venv_path`` names its venv where it is
now (pvegpu.plan.restart_hint), not the build the link points at since.

>>> moved_by_switch({"venv_path_is_dir": True}, "/root/venv", 7)
{'/root/venv': '/root/venv.pre-pvegpu.7'}
"""

from __future__ import annotations

import shlex

from pyinfra import logger
from pyinfra.api import FunctionCommand, StringCommand

from ..plan.venvs import aside_path
from ..run.run_context import node_of_host, run_context


def moved_by_switch(state: dict, venv_path: str, now: float) -> dict[str, str]:
    """{``venv_path``: where what was there is once the switch ran at ``now``}: a venv made by
    hand moved aside, or the build the link pointed at ({} when there was none).

    >>> moved_by_switch({"venv_link": "/root/venvs/b"}, "/root/venv", 7)
    {'/root/venv': '/root/venvs/b'}
    >>> moved_by_switch({}, "/root/venv", 7)
    {}
    """
    if state.get("venv_path_is_dir"):
        return {venv_path: aside_path(venv_path, now)}
    old = state.get("venv_real") or state.get("venv_link")
    return {venv_path: old} if old else {}


def record_moved(state, host, moved: dict[str, str]) -> bool:
    """Record (a command's function: after the switch ran) where the venv it moved away from
    ``venv_path`` is, under the node's name and the container's vmid, as the hints read it."""
    key = (node_of_host(host), int(host.data.get("pct_vmid") or 0))
    run_context(state).venv_moved.setdefault(key, {}).update(moved)
    return True


def moved_record(state: dict, venv_path: str, now: float) -> FunctionCommand | None:
    """The command that records what the switch at ``now`` moved (:func:`record_moved`); None
    when nothing was at ``venv_path`` (a first switch)."""
    moved = moved_by_switch(state, venv_path, now)
    return FunctionCommand(record_moved, (moved,), {}) if moved else None


def aside_note(path: str, aside: str) -> FunctionCommand:
    """A command that names the venv made by hand at ``path`` with its size, before the switch
    moves it to ``aside`` (kept: pvegpu never deletes it)."""

    def report(state, host):
        q = shlex.quote(path)
        ok, out = host.run_shell_command(StringCommand(f"du -sh {q} | cut -f1"))
        size = out.stdout.strip() if ok and out.stdout.strip() else "size unknown"
        host.log_styled(
            f"{path} is a venv made by hand ({size}): moved aside to {aside} "
            "and kept (delete it yourself once the new build runs)",
            fg="yellow",
            log_func=logger.warning,
        )
        return True

    return FunctionCommand(report, (), {})
