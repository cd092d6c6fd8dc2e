"""One read of a node's composite state per run, shared by the preflight, the node stage and
verify's node parity; read again only after an operation of the run ran commands.

A real node pays an SSH session for every read, and a ``pct exec`` (Perl start-up) for each
container's own view in it, so a converged run reads the node once: the preflight's read (every
container of the node, ``ct_detail="full"``) covers what every later stage asks for.

>>> covers(Read(0, (200,), "full", {"unit_name": "u"}, {}), (200,), "status", {"unit_name": "u"})
True
>>> covers(Read(0, (), "full", {}, {}), (200,), "none", {})
False
>>> covers(Read(0, (200,), "full", {}, {}, ("/a",)), (200,), "full", {}, ("/a", "/b"))
False
"""

from __future__ import annotations

from dataclasses import dataclass

from .facts.proxmox import NodeState

DETAIL = {"none": 0, "status": 1, "full": 2}


@dataclass(frozen=True)
class Read:
    """A node document and what it was read with: at which ``changes`` point, which containers,
    how much of them, the other probe arguments, and the node paths whose kinds it holds."""

    point: int
    vmids: tuple
    ct_detail: str
    args: dict
    doc: dict
    paths: tuple = ()
    reads: dict | None = None  # {vmid: [container command, ...]} folded in (pvegpu.ct_reads)


def changes(state) -> int:
    """How many operations of the run (on any host) have run commands so far: a node operation
    can re-create a container, a container's can start a training process on the node's GPUs."""
    return sum(
        1 for ops in state.ops.values() for data in ops.values() if data.operation_meta.executed
    )


def covers(read: Read, vmids, ct_detail: str, args: dict | None, paths=()) -> bool:
    """Whether ``read`` holds everything a read with these arguments would."""
    return (
        set(vmids) <= set(read.vmids)
        and DETAIL[ct_detail] <= DETAIL[read.ct_detail]
        and (args is None or args == read.args)
        and set(paths) <= set(read.paths)
    )


def node_state(
    node_host, vmids=(), ct_detail: str = "none", args: dict | None = None, paths=(), ct_reads=None
) -> dict:
    """The node's ``NodeState`` document, from this run's last read when nothing ran since and it
    covers the request, else read now (``args``: the probe's other arguments; None: any earlier
    read will do, and a fresh read uses the probe's defaults; ``paths``: node paths whose kind
    the document must hold, under ``path_kinds``; ``ct_reads``: container commands to run in each
    container's exec of a fresh read, see :mod:`pvegpu.ct_reads`)."""
    state = node_host.state
    reads = state.__dict__.setdefault("pvegpu_node_reads", {})
    point = changes(state)
    last = reads.get(node_host.name)
    if last is not None and last.point == point and covers(last, vmids, ct_detail, args, paths):
        return last.doc
    doc = (
        node_host.get_fact(
            NodeState,
            vmids=list(vmids),
            ct_detail=ct_detail,
            paths=list(paths),
            **({"reads": ct_reads} if ct_reads else {}),
            **(args or {}),
        )
        or {}
    )
    if doc:
        reads[node_host.name] = Read(
            point, tuple(vmids), ct_detail, dict(args or {}), doc, tuple(paths), ct_reads
        )
    return doc


def last_read(state, node_name: str) -> Read | None:
    """This run's read of ``node_name`` while it is current (no operation ran since)."""
    last = state.__dict__.get("pvegpu_node_reads", {}).get(node_name)
    return last if last is not None and last.point == changes(state) else None
