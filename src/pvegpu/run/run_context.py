"""Everything pvegpu keeps for one pyinfra run, in one object looked up in one place
(``run_context(state)``), instead of attributes on pyinfra's State and Host.

It holds the run's settings (validated once for every host), the preflight's outcome, the nodes'
deploy locks, the verdicts printed and reported, and the one cache of composite facts.

>>> class FakeState: ...
>>> st = FakeState()
>>> run_context(st) is run_context(st), run_context(st).mode
(True, 'deploy')

The fact cache has one rule: a document read when N operations of the run had run commands
serves every request it covers while that count is still N; an operation that knows exactly what
its commands changed updates the document and carries it past its own commands (``remember``).
A read of the node alone (verify's) also serves past operations that changed only their own
container (``mark_container_only``; :func:`pvegpu.run.node_read.current`).

>>> cache, reads = FactCache(), []
>>> read = lambda: reads.append(1) or {"venvs": 1}
>>> cache.get(("ct", "h"), 0, read)["venvs"], cache.get(("ct", "h"), 0, read)["venvs"], len(reads)
(1, 1, 1)
>>> cache.remember(("ct", "h"), 0, True, lambda doc: doc.update(venvs=2))
>>> cache.get(("ct", "h"), 1, read)["venvs"], len(reads)  # past its own commands: no read
(2, 1)
>>> cache.get(("ct", "h"), 2, read)["venvs"], len(reads)  # another operation ran: read again
(1, 2)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from gevent.lock import Semaphore

if TYPE_CHECKING:
    from ..settings import Settings


@dataclass
class Entry:
    """A cached document, the run point it is valid at, and what it was read with."""

    point: int
    doc: dict
    request: Any = None
    #: a node read's count of node-changing operations when read (``node_changing_operations``)
    node_point: int | None = None


@dataclass
class FactCache:
    """Composite facts (a node's NodeState, a container's ContainerState) by key."""

    entries: dict[Any, Entry] = field(default_factory=dict)

    def get(
        self,
        key: Any,
        point: int,
        read: Callable[[], dict],
        request: Any = None,
        fits: Callable[[Any], bool] | None = None,
    ) -> dict:
        """The cached document of ``key`` while the run is at ``point`` and ``fits(what it was
        read with)``, else ``read()`` now, kept with ``request`` (an empty document is not)."""
        entry = self.entries.get(key)
        if entry is not None and entry.point == point and (fits is None or fits(entry.request)):
            return entry.doc
        doc = read()
        if doc:
            self.entries[key] = Entry(point, doc, request)
        return doc

    def remember(
        self, key: Any, point: int, executing: bool, update: Callable[[dict], Any]
    ) -> None:
        """After an operation's last command ran (at ``point``): apply ``update(doc)`` and keep
        the document valid once that operation counts as run. Outside execution (a preview
        walking an operation's commands) nothing ran: the document is dropped instead."""
        entry = self.entries.get(key)
        if entry is None:
            return
        if not executing:
            del self.entries[key]
            return
        update(entry.doc)
        entry.point = point + 1


@dataclass
class RunContext:
    """One pyinfra run of deploy.py or verify.py, as pvegpu sees it."""

    #: "deploy" or "verify" (verify.py: read-only, prints its verdict in the preview too)
    mode: str = "deploy"
    #: every host's validated settings, by host name (None: not validated yet)
    settings: dict[str, Settings] | None = None
    #: the first host validates and preflights; the others wait here for its result or error
    preflight_lock: Semaphore = field(default_factory=Semaphore)
    preflight_error: Exception | None = None
    #: {node name: problem lines} of the nodes that must not be touched in this run
    node_failures: dict[str, list[str]] = field(default_factory=dict)
    #: {node name: the node probe's arguments} (preflight.node_read_args): the same every read
    node_args: dict[str, dict] = field(default_factory=dict)
    #: {node name: channel} of the deploy locks this run holds
    node_locks: dict[str, Any] = field(default_factory=dict)
    #: a preview (no -y) or --dry: no lock at the start; taken when changes start, if ever
    lock_deferred: bool = False
    #: pyinfra's --dry (read where click's context is at hand: not in an operation's greenlet)
    dry: bool = False
    #: the preflight's lines printed so far (a preflight read again prints only new ones)
    preflight_printed: set[str] = field(default_factory=set)
    #: what the preview (or --diff) showed: (host name, title, lines), shown once
    shown: set[tuple] = field(default_factory=set)
    #: {node name: gevent lock}: one node's check when a previewed run's changes start
    start_checks: dict[str, Any] = field(default_factory=dict)
    #: the callback handler that records failed operations for the end-of-run summary
    summary: Any = None
    #: {host name: Verdict} for the JSON report; {host name: lines} printed already
    verdicts: dict[str, Any] = field(default_factory=dict)
    printed: dict[str, list[str]] = field(default_factory=dict)
    facts: FactCache = field(default_factory=FactCache)
    #: {node name: gevent lock}: one read of a node at a time, so hosts asking side by side
    #: (verify.py's containers of one node) share one read (pvegpu.run.node_read)
    node_read_locks: dict[str, Any] = field(default_factory=dict)
    #: (host name, operation hash) of the operations that change only their own container
    #: (``mark_container_only``)
    container_only: set[tuple[str, str]] = field(default_factory=set)
    #: {(node name, vmid): [Trainer, ...]}: the trainings running in each container, from the
    #: run's first full node read (pvegpu.run.adoption)
    trainers: dict[tuple[str, int], list] = field(default_factory=dict)
    #: {node name: [line, ...]}: the changes that wait for a running training, and for which
    waiting: dict[str, list[str]] = field(default_factory=dict)
    waiting_for: dict[str, Any] = field(default_factory=dict)
    #: {container host name: why its training unit's restart is pending} (no consent)
    restart_pending: dict[str, list[str]] = field(default_factory=dict)
    #: node host names deploy.py's last operation failed to match their closing line: their
    #: failure is that line's, not one of their own (pvegpu.operations.fleet.node_outcome)
    failed_for_outcome: set[str] = field(default_factory=set)
    #: container host names whose training unit this run stopped for verify_level=compile (with
    #: restart_training=true): started again when the verification then fails
    stopped_for_compile: set[str] = field(default_factory=set)
    #: {node name: [RestartHint, ...]}: what the takeover stopped on each node, as the one
    #: command that starts it again (the last line of a run that fails after it names them)
    taken_over: dict[str, list] = field(default_factory=dict)
    #: {(node name, vmid): {venv_path: where the venv that was there is now}}: a hand-made venv
    #: the switch moved aside, or the build the link pointed at (the hints name it there)
    venv_moved: dict[tuple[str, int], dict[str, str]] = field(default_factory=dict)
    #: {node name: the training a takeover's stop is stopping now} (what an interrupt names)
    stopping: dict[str, str] = field(default_factory=dict)
    #: node names whose takeover stage has run: a change that waits after it is no longer
    #: deferred to a takeover that follows (none does)
    takeover_ran: set[str] = field(default_factory=set)
    #: SIGINT and SIGTERM are handled (pvegpu.startup.interrupt)
    interrupt_handled: bool = False


_RUNS: WeakKeyDictionary[Any, RunContext] = WeakKeyDictionary()


def run_context(state) -> RunContext:
    """The context of the run ``state`` (pyinfra's State) belongs to, made on first use."""
    context = _RUNS.get(state)
    if context is None:
        context = _RUNS[state] = RunContext()
    return context


def executed_operations(state, node: str | None = None) -> int:
    """How many operations of the run (on any host) have run commands so far: the run point of
    the fact cache (a node operation can re-create a container, a container's can start a
    training process on the node's GPUs). ``node``: only those of that node's hosts (the node
    and its containers): an operation on another node of the fleet changes nothing a read of
    this one holds, so a fleet's reads do not go stale with every other node's operations.

    >>> from types import SimpleNamespace as NS
    >>> ran = NS(operation_meta=NS(executed=True))
    >>> class FakeState: ops = {"a": {"x": ran}, "@pct/b/200": {"x": ran, "y": ran}}
    >>> executed_operations(FakeState), executed_operations(FakeState, "b")
    (3, 2)
    """
    return sum(
        1
        for h, ops in state.ops.items()
        if node is None or node_of_host(h) == node
        for data in ops.values()
        if data.operation_meta.executed
    )


def container_operations(state, ct_host) -> int:
    """How many operations of the run have run commands on ``ct_host`` (a training container)
    or on its node host: the run point of that container's own cached reads. A sibling
    container's operations change only their own container (its files, its unit), never this
    one's files, so two containers' switches side by side do not make each other read again.

    >>> from types import SimpleNamespace as NS
    >>> ran = NS(operation_meta=NS(executed=True))
    >>> a, b = "@pct/n/200", "@pct/n/201"  # host names: pyinfra's hosts name themselves
    >>> class FakeState: ops = {"n": {"x": ran}, a: {"x": ran}, b: {"x": ran, "y": ran}}
    >>> container_operations(FakeState, a), executed_operations(FakeState, "n")
    (2, 4)
    """
    node, name = node_of_host(ct_host), getattr(ct_host, "name", ct_host)
    return sum(
        1
        for h, ops in state.ops.items()
        if getattr(h, "name", h) in (name, node)
        for data in ops.values()
        if data.operation_meta.executed
    )


def node_of_host(h) -> str:
    """The node a pyinfra host (or a host name) belongs to: ``pct_node`` for a container.

    >>> node_of_host("@pct/10.1.2.6/200"), node_of_host("10.1.2.6")
    ('10.1.2.6', '10.1.2.6')
    """
    data = getattr(h, "data", None)
    node = data.get("pct_node") if data is not None else None
    name = str(getattr(h, "name", h))
    return node or (name.split("/")[1] if name.startswith("@pct/") else name)


def mark_container_only(host) -> None:
    """Called in an operation's body: its commands change only files of its own container (a venv
    link, a unit file and systemd's reload of it), never what a node read holds about the node
    itself (its devices, driver, GPUs and their processes), so such a read stays current past it
    (``node_changing_operations``). An operation that runs GPU code or starts, stops or restarts
    a unit must not call this.

    .. code:: python

        mark_container_only(host)  # first thing in the operation's body
    """
    if host.current_op_hash:
        run_context(host.state).container_only.add((host.name, host.current_op_hash))


def node_changing_operations(state, node: str | None = None) -> int:
    """How many operations of the run have run commands that may change what a node read holds
    about the node itself: ``executed_operations`` less the container-only ones (``node``: of
    that node's hosts only).

    >>> from types import SimpleNamespace as NS
    >>> ran = NS(operation_meta=NS(executed=True))
    >>> class FakeState: ops = {"ct": {"switch": ran, "restart": ran}}
    >>> st = FakeState()
    >>> run_context(st).container_only.add(("ct", "switch"))
    >>> executed_operations(st), node_changing_operations(st)
    (2, 1)
    """
    only = run_context(state).container_only
    return sum(
        1
        for h, ops in state.ops.items()
        if node is None or node_of_host(h) == node
        for op_hash, data in ops.items()
        if data.operation_meta.executed and (getattr(h, "name", h), op_hash) not in only
    )
