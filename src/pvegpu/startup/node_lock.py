"""One deploy at a time per node: an flock on the node, held for the whole run.

Two deploys at once (a swap and a new requirement, say) would interleave their builds and switches
and both report VERIFIED. So deploy.py takes ``/run/lock/pvegpu-deploy.lock`` on every node before
it reads anything (pvegpu.startup.preflight), through the node's own SSH connection, for the node
and all its containers (their commands all run on the node).

How a lock outlives one command: a second SSH channel runs a small holder on the node, which
takes the flock and then ``exec``s ``cat`` on the channel's stdin. The lock lives exactly as long
as that channel: pyinfra closes it when the run ends, and when the controller dies (even by
SIGKILL) its TCP connection closes, sshd ends the session, ``cat`` reads EOF and the kernel drops
the lock. Nothing stale is left behind to clean up (/run is a tmpfs, too).

A second deploy waits ``deploy_lock_wait_s`` seconds, then refuses with one line naming the
holder: its pid on the node, since when, and the command it runs. verify.py takes no lock: it only
reads. Nor does a preview (deploy.py without -y) or ``--dry``: they change nothing, so they never
wait behind a deploy; a preview that goes on takes the lock when its changes start
(:mod:`pvegpu.startup.changes_start`).

>>> print(holder_script(5, "pyinfra inventory.py deploy.py").splitlines()[2])
if ! flock -n 9; then
>>> redact("pyinfra --data package_index_url=https://me:tok@mirror/simple")
'pyinfra --data package_index_url=https://***@mirror/simple'
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import sys

import click
from pyinfra import logger

from ..connectors.shared_ssh import keep_alive

LOCK = "/run/lock/pvegpu-deploy.lock"
HOLDER = "/run/lock/pvegpu-deploy.holder"
#: held by the takeover's stop process on the node for as long as it runs (probes/training_stop.py)
STOP_LOCK = "/run/lock/pvegpu-stop.lock"
STOP_HOLDER = "/run/lock/pvegpu-stop.holder"
#: Exit status of the holder when the wait ran out (EX_TEMPFAIL).
BUSY_EXIT = 75


def redact(text: str) -> str:
    """Hide credentials of URLs (``scheme://user:token@host``) in a command line."""
    return re.sub(r"://[^/@\s]+@", "://***@", text)


def this_run() -> str:
    """What the holder record says this run is: its command line and where the controller runs."""
    argv = list(sys.argv)
    if argv and "pyinfra" in argv[0]:
        argv[0] = "pyinfra"
    command = " ".join(shlex.quote(a) for a in argv)
    return redact(f"{command} (controller {socket.gethostname()} pid {os.getpid()})")


def lock_at_start(state) -> bool:
    """Whether this run takes the nodes' deploy locks at its start, before its preflight reads: a
    deploy with -y (no preview: its changes start right after) that is not ``--dry``.

    >>> class Preview:
    ...     def should_check_for_changes(self): return True
    >>> lock_at_start(Preview())
    False
    """
    if state.should_check_for_changes():  # a preview first: the user may never go on
        return False
    return not is_dry()


def is_dry(argv: list[str] | None = None) -> bool:
    """Whether this is pyinfra's ``--dry`` (its CLI's flag): no change is ever made, even with
    -y, though pyinfra still generates each operation's commands (its JSON plan lists them).

    Click's context is no help here: pyinfra loads deploy files in one greenlet per host, and
    click's context stack is thread-local, which gevent makes greenlet-local (it is None there).
    So the flag is read from pyinfra's command line, as click parsed it (a flag, never a value).

    >>> is_dry(["pyinfra", "inventory.py", "deploy.py", "--dry", "-y"])
    True
    >>> is_dry(["pyinfra", "inventory.py", "deploy.py", "--data", "note=--dry"])
    False
    """
    context = click.get_current_context(silent=True)
    if context is not None:
        return bool(context.params.get("dry"))
    return "--dry" in (sys.argv if argv is None else argv)


def holder_script(wait_s: int, who: str) -> str:
    """The node-side holder: take the flock (waiting at most ``wait_s``), record who holds it,
    print ``LOCKED``, then keep it until stdin closes. Prints ``WAIT <holder>`` when it has to wait
    and ``BUSY <holder>`` (exit 75) when the wait ran out."""
    return "\n".join(
        [
            "mkdir -p /run/lock || exit 1",
            f"exec 9>>{LOCK} || exit 1",
            "if ! flock -n 9; then",
            f'  echo "WAIT $(cat {HOLDER} 2>/dev/null)"',
            f"  if ! flock -w {int(wait_s)} 9; then",
            f'    echo "BUSY $(cat {HOLDER} 2>/dev/null)"; exit {BUSY_EXIT}',
            "  fi",
            "fi",
            # a takeover's stop outlives the deploy that started it (Ctrl-C, a lost connection)
            # and holds the stop lock until its checkpoints are written: wait for it as well
            f"exec 8>>{STOP_LOCK} || exit 1",
            "if ! flock -n 8; then",
            f'  echo "WAIT $(cat {STOP_HOLDER} 2>/dev/null)"',
            f"  if ! flock -w {int(wait_s)} 8; then",
            f'    echo "BUSY $(cat {STOP_HOLDER} 2>/dev/null)"; exit {BUSY_EXIT}',
            "  fi",
            "fi",
            "exec 8>&-",
            'printf "pid %s since %s: %s\\n" "$$" '
            f'"$(date -u +%Y-%m-%dT%H:%M:%SZ)" {shlex.quote(who)}'
            f" > {HOLDER}.tmp && mv -f {HOLDER}.tmp {HOLDER}",
            "echo LOCKED",
            # exec keeps the pid the record names and the fd that holds the lock; EOF ends both.
            "exec cat >/dev/null",
        ]
    )


def busy_line(node: str, holder: str, wait_s: int) -> str:
    """The refusal when another deploy kept the lock for the whole wait.

    >>> busy_line("n1", "pid 7 since 2026-01-01T00:00:00Z: pyinfra ...", 60)[:56]
    'n1: another deploy holds the node (pid 7 since 2026-01-0'
    >>> busy_line("n1", "the takeover's stop of CT 200's training (pid 9)", 60)[:50]
    "n1: the takeover's stop of CT 200's training (pid "
    """
    if holder.startswith("the takeover's stop"):
        return (
            f"{node}: {holder} still runs on the node (the checkpoints it waits for; lock "
            f"{STOP_LOCK}); waited {wait_s}s: let it finish, then run again "
            "(deploy_lock_wait_s sets the wait)"
        )
    return (
        f"{node}: another deploy holds the node ({holder or 'holder unknown'}; lock {LOCK}); "
        f"waited {wait_s}s: let it finish, then run again (deploy_lock_wait_s sets the wait)"
    )


def acquire(node_host, wait_s: int) -> tuple[object | None, str | None]:
    """Take the node's deploy lock for the rest of this run: ``(channel, None)``, or
    ``(None, one line why not)``. Keep the channel referenced: closing it releases the lock."""
    client = getattr(node_host.connector, "client", None)
    transport = client.get_transport() if client is not None else None
    if transport is None or not transport.is_active():
        return None, (
            f"{node_host.name}: cannot take the deploy lock {LOCK}: no SSH connection to the node"
        )
    # the lock's channel is idle for the whole run: keep the connection under it alive
    keep_alive(client, node_host.data)
    channel = transport.open_session()
    channel.exec_command(holder_script(wait_s, this_run()))
    for raw in channel.makefile("rb"):
        line = raw.decode(errors="replace").strip()
        if line == "LOCKED":
            return channel, None
        if line.startswith("WAIT"):
            logger.warning(
                f"--> {node_host.name}: waiting up to {wait_s}s for the deploy lock, "
                f"held by {line[5:] or 'another deploy'}"
            )
        elif line.startswith("BUSY"):
            channel.close()
            return None, busy_line(node_host.name, line[5:], wait_s)
    status = channel.recv_exit_status()
    channel.close()
    return None, (
        f"{node_host.name}: could not take the deploy lock {LOCK} (holder exited "
        f"{status}): check that flock (util-linux) is installed on the node"
    )
