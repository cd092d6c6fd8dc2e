"""Helpers shared by pvegpu operations."""

from __future__ import annotations

import base64
import shlex

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation


def fail(*lines: str) -> FunctionCommand:
    """A command that fails the host with one clear line per problem (no traceback).

    Yield it from an operation only when a check fails, so a passing check yields nothing and
    reports no change.
    """

    def report(state, host):
        for line in lines:
            host.log_styled(line, fg="red", log_func=logger.error)
        return False

    return FunctionCommand(report, (), {})


def failure(*lines: str):
    """Where a check fails: ``yield from failure(...)``. At execution the host fails with one line
    per problem; in a preview the lines are printed as a failure and nothing is yielded (pyinfra
    would list any command, a failure too, among the changes to make)."""
    state = getattr(host, "state", None)  # None: an operation's body called outside a run
    if state is None or state.is_executing:
        yield fail(*lines)
        return
    for line in lines:
        host.log_styled(f"fails: {line}", fg="red", log_func=logger.error)


def notice(*lines: str) -> None:
    """Print a visible notice now, without yielding a command (a notice is not a change)."""
    for line in lines:
        host.log_styled(line, fg="yellow", log_func=logger.warning)


def note(*lines: str) -> FunctionCommand:
    """A command that prints lines and succeeds (it counts as a change: use only with one)."""

    def report(state, host):
        for line in lines:
            host.log_styled(line, fg="yellow", log_func=logger.warning)
        return True

    return FunctionCommand(report, (), {})


def write_file_command(path: str, content: str, mode: str | None = None) -> StringCommand:
    """Write `content` to `path` atomically (temp file + rename), safe for any bytes.

    >>> str(write_file_command("/etc/x", "a'b\\n")).startswith("printf")
    True
    """
    payload = base64.b64encode(content.encode()).decode()
    q = shlex.quote(path)
    chmod = f" && chmod {mode} {q}.pvegpu-tmp" if mode else ""
    return StringCommand(
        f"printf %s {payload} | base64 -d > {q}.pvegpu-tmp{chmod} && mv -f {q}.pvegpu-tmp {q}"
    )


@operation()
def barrier():
    """Order stages across host groups: every host runs this one operation, so no operation
    after it starts before every host finished the ones before it. Changes nothing.

    pyinfra orders operations as a DAG per host and runs ready operations of different hosts side
    by side; without a shared operation, a container's first operation would run beside the
    node's first one, before the container even exists.

    .. code:: python

        util.barrier(name="Node stages done")
    """
    return
    yield
