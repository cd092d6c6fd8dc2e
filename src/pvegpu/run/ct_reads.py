"""Container reads folded into the node read's one ``pct exec`` per container.

On a real node every ``pct exec`` pays Perl's start-up (a few hundred ms). The preflight's node
read already enters each container once (its own view of the driver, ``NodeState``'s
``ct_detail="full"``); the container facts a converged run reads first (``ContainerState`` and
``ContainerVerification``) run in that same exec, after the view. A fact is served from there while
the node read is current (no operation of the run has run a command since: pvegpu.run.node_read's
rule) and its command is the very one folded in; otherwise, or when the folded run failed, it is
read as usual over the @pct connector, with the same result.

An operation that changes the container can likewise run the reads that come next in the same
``pct exec``, right after its change (``change_then_read``: the python env stage's venv switch
runs verify's read of the container); their output serves while no other operation ran since.

>>> shell_command(200, "python3 -c 'print(1)'").split()[:2]
['env', '-i']
"""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase, StringCommand
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.api.exceptions import FactProcessError
from pyinfra.connectors.util import extract_control_arguments, make_unix_command_for_host

from ..connectors.pct import pct_exec_argv
from . import node_read
from .run_context import Entry, container_operations, run_context

# Linux's limit on one argument (MAX_ARG_STRLEN, 32 pages: 128 KiB). The node command carries
# the folded reads on its stdin (pvegpu.facts.proxmox.NodeState), so they do not count against
# it; each container's reads are its own `pct exec <vmid> -- sh -c <script>`'s script, one
# argument (through pct's Perl and lxc-attach), with the view and the wrappers (about 3 KB).
MAX_ARG_STRLEN = 128 * 1024
# What one container's folded reads may take of that argument: the rest runs through the
# connector as usual. Each container has its own (a state and a verification read, about 50-60 KB).
FOLD_BUDGET = MAX_ARG_STRLEN - 8 * 1024
# Arguments that change how a command runs beyond its text (a user, a password prompt, stdin):
# such a fact is never folded, it runs through the connector.
UNFOLDABLE = ("_sudo", "_su_user", "_doas", "_dzdo", "_stdin")


def shell_command(vmid: int, inner: str) -> str:
    """What ``pct exec <vmid> --`` runs for the connector's ``inner`` command, as one shell line."""
    return shlex.join(pct_exec_argv(vmid, inner)[4:])


def container_command(ct_host, fact: FactBase, kwargs: dict) -> str | None:
    """The shell line the @pct connector would run in ``ct_host``'s container to read ``fact``
    with ``kwargs`` right now (global arguments of the current operation included), or None
    when it must run through the connector."""
    command = fact.command(**kwargs)
    if not isinstance(command, (str, StringCommand)):
        return None
    return command_line(ct_host, command)


def command_line(ct_host, command: str | StringCommand) -> str | None:
    """The shell line the @pct connector would run in ``ct_host``'s container for ``command``
    right now (the current operation's global arguments included), or None when it must run
    through the connector (a user to become, a password prompt, its own stdin)."""
    arguments, _ = pop_global_arguments(
        ct_host.state, ct_host, dict(ct_host.current_op_global_arguments or {})
    )
    executor = {k: v for k, v in arguments.items() if k in CONNECTOR_ARGUMENT_KEYS}
    extract_control_arguments(executor)  # type: ignore[arg-type]
    if any(arguments.get(k) for k in UNFOLDABLE):
        return None
    inner = make_unix_command_for_host(ct_host.state, ct_host, StringCommand(command), **executor)
    return shell_command(int(ct_host.data.get("pct_vmid")), inner.get_raw_value())


def folded_commands(ct_host, reads: list[tuple[type[FactBase], dict]]) -> list[str]:
    """The shell lines to fold into the node read for ``reads`` ((fact class, kwargs) each)."""
    lines = [container_command(ct_host, cls(), kwargs) for cls, kwargs in reads]
    return [line for line in lines if line is not None]


def folded_output(ct_host, command: str) -> list[str] | None:
    """The stdout lines of ``command`` as the run's current node read ran it in the container,
    when it ran there and exited 0; else None."""
    node, vmid = ct_host.data.get("pct_node"), str(ct_host.data.get("pct_vmid"))
    last = node_read.last_read(ct_host.state, str(node)) if node else None
    asked = ((last.request.reads or {}).get(vmid) or []) if last is not None else []
    if command not in asked:
        return None
    assert last is not None
    done = ((last.doc.get("containers") or {}).get(vmid) or {}).get("reads") or []
    i = asked.index(command)
    if i >= len(done) or done[i].get("rc") != 0 or not done[i].get("stdout"):
        return None
    return list(done[i]["stdout"])


def container_fact(ct_host, cls: type[FactBase], **kwargs):
    """``ct_host.get_fact(cls, **kwargs)``, served from the node read's exec when it ran exactly
    this read and nothing ran since, or from the exec of the change that ran just before
    (``change_then_read``); see the module's docstring."""
    fact = cls()
    command = container_command(ct_host, fact, kwargs)
    lines = None
    if command is not None:
        lines = folded_output(ct_host, command) or read_after_change(ct_host, command)
    if lines:
        try:
            return fact.process(lines)
        except FactProcessError:
            pass  # read it again through the connector: it reports the failure as usual
    return ct_host.get_fact(cls, **kwargs)


# Each read after a change: in a subshell (an `exit` in it ends only itself), its stdout between
# markers (the extra echo ends a last line without a newline; one empty line is dropped), then
# its exit status; the same layout as the node probe's folded reads (probes/ct_view.py).
READ_AFTER = 'echo "pvegpu-read {i}"\n(\n{line}\n)\nrc=$?; echo; echo "pvegpu-read-end {i} $rc"\n'


def change_then_read_script(change: str, lines: list[str]) -> str:
    """The shell text that runs ``change`` and, only when it succeeded, each of ``lines``; its
    exit status is the change's (a failed read is read again later, through the connector). The
    change runs in a subshell of its own, as it would alone: its ``set -e`` works (in a list
    such as ``{ ...; } || exit`` the shell ignores it) and ends with it, its ``exit`` ends only it.

    >>> print(change_then_read_script("mv -T a b", ["cat x"]))
    (
    mv -T a b
    )
    rc=$?; [ "$rc" -eq 0 ] || exit "$rc"
    echo "pvegpu-read 0"
    (
    cat x
    )
    rc=$?; echo; echo "pvegpu-read-end 0 $rc"
    exit 0
    """
    reads = "".join(READ_AFTER.format(i=i, line=line) for i, line in enumerate(lines))
    return f'(\n{change}\n)\nrc=$?; [ "$rc" -eq 0 ] || exit "$rc"\n{reads}exit 0'


def split_reads(stdout: list[str], lines: list[str]) -> dict[str, list[str]]:
    """{read's line: its stdout} of the reads in ``stdout`` that ran to the end and exited 0.

    >>> split_reads(["pvegpu-read 0", "{}", "", "pvegpu-read-end 0 0", "pvegpu-read 1", "x",
    ...              "pvegpu-read-end 1 2"], ["a", "b"])
    {'a': ['{}']}
    """
    done: dict[str, list[str]] = {}
    i = 0
    current: list[str] | None = None  # the stdout of read i so far (None: between reads)
    for text in stdout:
        if current is None:
            current = [] if text == f"pvegpu-read {i}" else None
        elif text.startswith(f"pvegpu-read-end {i} "):
            if current and current[-1] == "":
                current.pop()
            if text.rsplit(" ", 1)[1] == "0" and i < len(lines):
                done[lines[i]] = current
            i, current = i + 1, None
        else:
            current.append(text)
    return done


class ChangeThenRead(StringCommand):
    """A change's shell text followed by reads (``change_then_read_script``): run as any command
    of its operation (its global arguments, pyinfra's output on failure), then keeps the reads'
    answers for the operation that comes next (``read_after_change``)."""

    def __init__(self, script: str, lines: list[str]):
        super().__init__(script)
        self.lines = lines

    def execute(self, state, host, connector_arguments):
        status, output = super().execute(state, host, connector_arguments)
        if status and state.is_executing:
            keep_reads(state, host, split_reads(list(output.stdout_lines), self.lines))
        return status, output


def keep_reads(state, ct_host, done: dict[str, list[str]]) -> None:
    """Keep the answers of reads that ran right after the current operation's change (in its
    last command) for the operation that comes next (``read_after_change``)."""
    # valid once this operation counts as run (it does not yet: +1), as remember() does
    point = container_operations(state, ct_host) + 1
    run_context(state).facts.entries[("after", ct_host.name)] = Entry(point, done)


def change_then_read(ct_host, change: str, reads: list[tuple[type[FactBase], dict]]):
    """A command that runs ``change`` in ``ct_host``'s container and, in the same ``pct exec``,
    the ``reads`` ((fact class, kwargs) each) the next operation makes; their answers serve
    ``container_fact`` once this operation has run, while no other operation ran since. Call it
    in an operation's body; it fails the host as the change alone would.

    .. code:: python

        yield change_then_read(host, "mv -T /root/venv.tmp /root/venv", [(Fact, kwargs)])
    """
    lines = folded_commands(ct_host, reads)
    if not lines:
        return StringCommand(change)
    return ChangeThenRead(change_then_read_script(change, lines), lines)


def read_after_change(ct_host, command: str) -> list[str] | None:
    """The stdout of ``command`` as the last operation's ``change_then_read`` ran it, while no
    other operation ran since; else None."""
    entry = run_context(ct_host.state).facts.entries.get(("after", ct_host.name))
    if entry is None or entry.point != container_operations(ct_host.state, ct_host):
        return None
    return entry.doc.get(command) or None


def within_budget(reads: dict[str, list[str]], budget: int = FOLD_BUDGET) -> dict[str, list[str]]:
    """The reads to fold, in order, while each container's text fits ``budget`` (its own exec's
    script; what does not fit runs through the connector as usual). Every container has its own
    budget: a second container folds as much as the first.

    >>> within_budget({"200": ["a" * 3, "b" * 3], "201": ["c" * 2, "d" * 3]}, budget=5)
    {'200': ['aaa'], '201': ['cc', 'ddd']}
    """
    kept: dict[str, list[str]] = {}
    for vmid, lines in reads.items():
        left = budget
        for line in lines:
            if len(line) > left:
                break
            left -= len(line)
            kept.setdefault(vmid, []).append(line)
    return kept
