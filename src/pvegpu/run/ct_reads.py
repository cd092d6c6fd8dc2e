"""Container reads folded into the node read's one ``pct exec`` per container.

On a real node every ``pct exec`` pays Perl's start-up (a few hundred ms). The preflight's node
read already enters each container once (its own view of the driver, ``NodeState``'s
``ct_detail="full"``); the container facts a converged run reads first (``ContainerState`` and
``ContainerVerification``) run in that same exec, after the view. A fact is served from there while
the node read is current (no operation of the run has run a command since: pvegpu.run.node_read's
rule) and its command is the very one folded in; otherwise, or when the folded run failed, it is
read as usual over the @pct connector, with the same result.

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

# The node probe travels as one argument of `sh -c` (at most 128 KiB on Linux: MAX_ARG_STRLEN),
# about 30 KB without reads; folded text grows it about 1.35 times (base64 of JSON). One
# container's state and verification read are about 50 KB (a node command of about 97 KB; at
# most 30 + 1.35 * 52 = 100 KB): more containers fold what fits.
FOLD_BUDGET = 52_000
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
    arguments, _ = pop_global_arguments(
        ct_host.state, ct_host, dict(ct_host.current_op_global_arguments or {})
    )
    executor = {k: v for k, v in arguments.items() if k in CONNECTOR_ARGUMENT_KEYS}
    extract_control_arguments(executor)  # type: ignore[arg-type]
    if any(arguments.get(k) for k in UNFOLDABLE):
        return None
    command = fact.command(**kwargs)
    if not isinstance(command, (str, StringCommand)):
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
    this read and nothing ran since (see the module's docstring)."""
    fact = cls()
    command = container_command(ct_host, fact, kwargs)
    lines = folded_output(ct_host, command) if command is not None else None
    if lines:
        try:
            return fact.process(lines)
        except FactProcessError:
            pass  # read it again through the connector: it reports the failure as usual
    return ct_host.get_fact(cls, **kwargs)


def within_budget(reads: dict[str, list[str]], budget: int = FOLD_BUDGET) -> dict[str, list[str]]:
    """The reads to fold, in order, while their text fits ``budget`` (what does not fit runs
    through the connector as usual); each container keeps its own order.

    >>> within_budget({"200": ["a" * 30, "b" * 30], "201": ["c" * 20]}, budget=55)
    {'200': ['aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'], '201': ['cccccccccccccccccccc']}
    """
    kept: dict[str, list[str]] = {}
    for vmid, lines in reads.items():
        for line in lines:
            if len(line) > budget:
                break
            budget -= len(line)
            kept.setdefault(vmid, []).append(line)
    return kept
