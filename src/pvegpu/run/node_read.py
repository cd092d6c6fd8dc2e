"""One read of a node's composite state per run, shared by the preflight, the node stage and
verify's node parity; read again only after an operation of the run ran commands (for the node
alone, as verify asks: only after one that may have changed the node, see :func:`current`).

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

from gevent.lock import Semaphore

from ..facts.proxmox import NodeState, reads_stdin
from .run_context import Entry, executed_operations, node_changing_operations, run_context

# "reads": the folded reads alone, in each container's one exec (verify.py's read: no view, the
# status only when the exec ran); it holds no more of the containers than "none" does
DETAIL = {"none": 0, "reads": 0, "status": 1, "full": 2}


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
    node_host,
    vmids=(),
    ct_detail: str = "none",
    args: dict | None = None,
    paths=(),
    ct_reads=None,
    fresh: bool = False,
    act: dict | None = None,
) -> dict:
    """The node's ``NodeState`` document, from this run's fact cache (its last read, when it is
    current, see :func:`current`, and covers the request), else read now (``args``: the probe's
    other arguments; None: any earlier read will do, and a fresh read uses the probe's defaults;
    ``paths``: node paths whose kind the document must hold, under ``path_kinds``; ``ct_reads``:
    container commands to run in each container's exec of a fresh read, see
    :mod:`pvegpu.run.ct_reads`; ``fresh``: read now whatever the cache holds, e.g. inside an
    operation whose own commands changed what runs; ``act``: a change gated on this read, made
    by the read's own command, see :mod:`pvegpu.run.gated`: always a fresh read)."""
    state, name = node_host.state, node_host.name
    want = Request(tuple(vmids), ct_detail, None if args is None else dict(args), tuple(paths))
    run = run_context(state)
    # one read of a node at a time: a host that asks while another's read runs waits for it
    with run.node_read_locks.setdefault(name, Semaphore()):
        return _node_state(node_host, want, args, ct_reads, fresh or bool(act), act)


def _node_state(
    node_host, want: Request, args: dict | None, ct_reads, fresh=False, act=None
) -> dict:
    state, name = node_host.state, node_host.name
    facts, key = run_context(state).facts, ("node", name)
    entry = facts.entries.get(key)
    cached = entry is not None and covers(entry.request, want)
    if not fresh and cached and current(state, entry, want, name):  # type: ignore[arg-type]
        return entry.doc  # type: ignore[union-attr]
    vmids, ct_detail, paths = want.vmids, want.ct_detail, want.paths
    # counted before the read: an operation that ends during it makes the next request read again
    point, node_point = executed_operations(state, name), node_changing_operations(state, name)
    fact_args: dict = {"vmids": list(vmids), "ct_detail": ct_detail, "paths": list(paths)}
    if ct_reads or act:  # on the command's stdin (NodeState): every container's fit
        fact_args.update(reads_on_stdin=True, _stdin=reads_stdin(ct_reads, act))
    doc = node_host.get_fact(NodeState, **fact_args, **(args or {})) or {}
    if doc:
        # kept with what it was read with: the probe's defaults when no arguments were given
        stored = Request(want.vmids, ct_detail, dict(args or {}), want.paths, ct_reads)
        facts.entries[key] = Entry(point, doc, stored, node_point)
    return doc


def current(state, entry: Entry, want: Request, node: str | None = None) -> bool:
    """Whether a cached node read still holds what ``want`` asks for: while no operation of the
    run ran commands since it was read; for the node alone (no container, no path), also past
    operations that changed only their own container (a venv switch, a unit file: they change
    neither the node's GPUs, driver and processes nor its containers' config, see
    :func:`pvegpu.run.run_context.mark_container_only`)."""
    if entry.point == executed_operations(state, node):
        return True
    node_only = not want.vmids and not want.paths
    return node_only and entry.node_point == node_changing_operations(state, node)


def last_read(state, node_name: str) -> Entry | None:
    """This run's cached read of ``node_name`` while it is current (no operation ran since):
    ``.doc`` the document, ``.request`` the :class:`Request` it was read with."""
    entry = run_context(state).facts.entries.get(("node", node_name))
    point = executed_operations(state, node_name)
    return entry if entry is not None and entry.point == point else None
