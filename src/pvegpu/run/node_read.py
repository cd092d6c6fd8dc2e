"""One read of a node's composite state per run, shared by the preflight, the node stage and
verify's node parity; read again only after an operation of the run ran commands.

A real node pays an SSH session for every read, and a ``pct exec`` (Perl start-up) for each
container's own view in it, so a converged run reads the node once: the preflight's read (every
container of the node, ``ct_detail="full"``) covers what every later stage asks for.

>>> args = {"unit_name": "u"}
>>> covers(Request((200,), "full", args), Request((200,), "status", args))
True
>>> covers(Request((), "full", {}), Request((200,), "none", {}))
False
>>> covers(Request((200,), "full", {}, ("/a",)), Request((200,), "full", {}, ("/a", "/b")))
False
>>> covers(Request((200,), "full", {"unit_name": "u"}), Request((200,), "full", None))
True
"""

from __future__ import annotations

from dataclasses import dataclass

from ..facts.proxmox import NodeState
from .run_context import Entry, executed_operations, run_context

DETAIL = {"none": 0, "status": 1, "full": 2}


@dataclass(frozen=True)
class Request:
    """What a node read asks for: which containers, how much of them, the probe's other
    arguments (None: any earlier read's will do) and the node paths whose kinds it must hold."""

    vmids: tuple
    ct_detail: str
    args: dict | None
    paths: tuple = ()
    reads: dict | None = None  # {vmid: [container command, ...]} folded in (pvegpu.run.ct_reads)


def covers(have: Request, want: Request) -> bool:
    """Whether a document read for ``have`` holds everything ``want`` asks for."""
    return (
        set(want.vmids) <= set(have.vmids)
        and DETAIL[want.ct_detail] <= DETAIL[have.ct_detail]
        and (want.args is None or want.args == have.args)
        and set(want.paths) <= set(have.paths)
    )


def node_state(
    node_host, vmids=(), ct_detail: str = "none", args: dict | None = None, paths=(), ct_reads=None
) -> dict:
    """The node's ``NodeState`` document, from this run's fact cache (its last read, when no
    operation ran a command since and it covers the request), else read now (``args``: the
    probe's other arguments; None: any earlier read will do, and a fresh read uses the probe's
    defaults; ``paths``: node paths whose kind the document must hold, under ``path_kinds``;
    ``ct_reads``: container commands to run in each container's exec of a fresh read, see
    :mod:`pvegpu.run.ct_reads`)."""
    state = node_host.state
    want = Request(tuple(vmids), ct_detail, None if args is None else dict(args), tuple(paths))

    def read() -> dict:
        fact_args = {"vmids": list(vmids), "ct_detail": ct_detail, "paths": list(paths)}
        if ct_reads:
            fact_args["reads"] = ct_reads
        return node_host.get_fact(NodeState, **fact_args, **(args or {})) or {}

    # kept with what it was read with: the probe's defaults when no arguments were given
    stored = Request(want.vmids, ct_detail, dict(args or {}), want.paths, ct_reads)
    return run_context(state).facts.get(
        ("node", node_host.name),
        executed_operations(state),
        read,
        stored,
        lambda have: covers(have, want),
    )


def last_read(state, node_name: str) -> Entry | None:
    """This run's cached read of ``node_name`` while it is current (no operation ran since):
    ``.doc`` the document, ``.request`` the :class:`Request` it was read with."""
    entry = run_context(state).facts.entries.get(("node", node_name))
    return entry if entry is not None and entry.point == executed_operations(state) else None
