"""Progress lines for steps that can last minutes: a venv build downloading torch, a stop waiting
for a training's checkpoint, the NVIDIA userspace installer, a container start.

pyinfra shows an operation's name and then nothing until it ends. :func:`run_with_progress` runs
the step's command over the host's own connection (its own greenlet) and, every
``progress_interval_s`` while it lasts, logs one line through pyinfra's logger (``host.log``:
the same output as every other line, nothing written to the terminal directly, so ``--json``,
logs and CI are untouched). A ``poll`` command, run on the same host only when a line is due,
adds what the step has done so far (bytes downloaded, the unit's sub-state). A step that ends
within the interval prints nothing and costs no extra round trip.

.. code:: python

    yield with_progress(
        StringCommand("systemctl stop dflash-train.service"),
        Progress("waiting for dflash-train.service to stop", interval_s=10, limit="900 s"),
    )
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import gevent
from paramiko import SSHException
from pyinfra import logger
from pyinfra.api import FunctionCommand, StringCommand
from pyinfra.api.util import log_host_command_error, print_host_combined_output
from pyinfra.connectors.util import CommandOutput


def no_detail(lines: list[str]) -> str:
    """The poll's last non-empty output line, as it is.

    >>> no_detail(["", "3 of 23 packages", ""])
    '3 of 23 packages'
    """
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


@dataclass(frozen=True)
class Progress:
    """What a long step says while it runs.

    ``what``: the step (``waiting for dflash-train.service to stop``); ``interval_s``: seconds
    between two lines; ``limit``: how long it may last, as text (``TimeoutStopSec=900s``), or
    None; ``poll``: a shell command on the same host whose output ``detail`` turns into the
    line's end (what the step has done so far), or None.
    """

    what: str
    interval_s: float
    limit: str | None = None
    poll: str | None = None
    detail: Callable[[list[str]], str] = no_detail


def seconds_text(seconds: float) -> str:
    """A duration as a person reads it.

    >>> seconds_text(7.9), seconds_text(65), seconds_text(3725)
    ('7 s', '1 min 5 s', '1 h 2 min')
    """
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def progress_line(what: str, waited_s: float, limit: str | None = None, detail: str = "") -> str:
    """One progress line: the step, how long it has run (of how long it may), what it did.

    >>> progress_line("waiting for t.service to stop", 25, "TimeoutStopSec=15min")
    'waiting for t.service to stop: 25 s so far (it may take up to TimeoutStopSec=15min)'
    >>> progress_line("building b.next", 70, detail="download, 12 MB in uv's cache")
    "building b.next: 1 min 10 s so far; download, 12 MB in uv's cache"
    """
    line = f"{what}: {seconds_text(waited_s)} so far"
    if limit:
        line += f" (it may take up to {limit})"
    if detail:
        line += f"; {detail}"
    return line


def poll_detail(host, progress: Progress) -> str:
    """What the step's ``poll`` command says now ("" when it has nothing or fails: a progress
    line never fails a step)."""
    if not progress.poll:
        return ""
    try:
        status, output = host.run_shell_command(StringCommand(progress.poll))
    except (OSError, SSHException, TimeoutError):
        return ""
    return progress.detail(list(output.stdout_lines)) if status else ""


def run_with_progress(state, host, command, progress: Progress) -> tuple[bool, CommandOutput]:
    """Run ``command`` on ``host`` as pyinfra would, logging a progress line every
    ``progress.interval_s`` until it ends: -> (status, output) of the command.

    The command runs in its own greenlet; this one only waits and reports, so the command's
    output, exit status and exceptions are exactly those of ``host.run_shell_command``.
    """

    def run():
        try:
            return host.run_shell_command(
                command, print_output=state.print_output, print_input=state.print_input
            )
        except Exception as e:  # handed to the caller below, not printed by gevent
            return e

    job = gevent.spawn(run)
    started = time.monotonic()
    try:
        while not job.ready():
            job.join(timeout=progress.interval_s)
            if job.ready():
                break
            detail = poll_detail(host, progress)
            if job.ready():
                break  # it ended while we asked: its end says more than a last line
            waited = time.monotonic() - started
            host.log_styled(
                progress_line(progress.what, waited, progress.limit, detail),
                fg="blue",
                log_func=logger.info,
            )
        result = job.get()
    finally:
        job.kill()  # only if a timeout (pyinfra's _timeout) interrupted the wait
    if isinstance(result, Exception):
        raise result
    return result


@contextmanager
def progress_while(host, progress: Progress) -> Iterator[None]:
    """Log progress lines while the body runs: for a step that is not one command (a fact read
    such as the verification). The body must wait cooperatively (pyinfra's I/O does, under
    gevent); nothing is logged when it ends within the interval.

    .. code:: python

        with progress_while(host, Progress("verifying the new build", 10)):
            ct = host.get_fact(ContainerVerification, ...)
    """
    started = time.monotonic()

    def tick():
        while True:
            gevent.sleep(progress.interval_s)
            detail = poll_detail(host, progress)
            waited = time.monotonic() - started
            host.log_styled(
                progress_line(progress.what, waited, progress.limit, detail),
                fg="blue",
                log_func=logger.info,
            )

    ticker = gevent.spawn(tick)
    try:
        yield
    finally:
        ticker.kill()


def with_progress(command: StringCommand | str, progress: Progress) -> ProgressCommand:
    """``command`` as a pyinfra command that logs progress lines while it runs (see
    :func:`run_with_progress`). It fails as the plain command would: the same exit status, and
    its output printed when it fails.

    >>> str(with_progress("sleep 1", Progress("sleeping", 10)))
    'sleep 1'
    """
    wrapped = StringCommand(command) if isinstance(command, str) else command
    return ProgressCommand(wrapped, progress)


class ProgressCommand(FunctionCommand):
    """A shell command with progress lines (:func:`with_progress`); ``str()`` is the command."""

    def __init__(self, command: StringCommand, progress: Progress):
        self.command = command
        self.progress = progress

        def run_reporting(state, host):
            try:
                status, output = run_with_progress(state, host, command, progress)
            except (TimeoutError, OSError, SSHException) as e:
                log_host_command_error(host, e)
                return False
            if not status and not state.print_output:
                print_host_combined_output(host, output)
            return status

        super().__init__(run_reporting, (), {})

    def __str__(self) -> str:
        return str(self.command)


def waiting_for(what: str, interval_s: float, limit: str | None = None, **poll) -> Progress:
    """The progress of waiting for something: ``waiting for <what>: N s so far (it may take up
    to <limit>)``.

    >>> waiting_for("t.service to stop", 10, "15min").what
    'waiting for t.service to stop'
    """
    return Progress(f"waiting for {what}", interval_s, limit, **poll)


def unit_stop_detail(lines: list[str]) -> str:
    """What ``systemctl show -p SubState,TimeoutStopUSec`` says about a stopping unit.

    >>> unit_stop_detail(["SubState=stop-sigterm", "TimeoutStopUSec=15min"])
    'stop-sigterm, SIGKILL after TimeoutStopSec=15min'
    """
    props = dict(line.split("=", 1) for line in lines if "=" in line)
    parts = [props.get("SubState") or "", ""]
    if props.get("TimeoutStopUSec"):
        parts[1] = f"SIGKILL after TimeoutStopSec={props['TimeoutStopUSec']}"
    return ", ".join(p for p in parts if p)


def unit_stop_progress(unit: str, interval_s: float) -> Progress:
    """The progress of a ``systemctl stop`` of ``unit`` in the container (a training writing its
    checkpoint): how long it has waited, the unit's sub-state and its TimeoutStopSec, read from
    systemd while it waits (the running unit's own: it may predate the settings).

    >>> unit_stop_progress("t.service", 10).poll
    'systemctl show -p SubState,TimeoutStopUSec t.service'
    """
    return waiting_for(
        f"{unit} to stop (a training writes its checkpoint)",
        interval_s,
        poll=f"systemctl show -p SubState,TimeoutStopUSec {shlex.quote(unit)}",
        detail=unit_stop_detail,
    )


__all__ = [
    "Progress",
    "ProgressCommand",
    "progress_line",
    "progress_while",
    "run_with_progress",
    "unit_stop_progress",
    "waiting_for",
    "with_progress",
]
