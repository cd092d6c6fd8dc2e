"""What is true of one node after a deploy, as one closing line: the decision, apart from pyinfra.

A node's run (:class:`NodeRun`: what its hosts did) is in exactly one state, the first of
:data:`STATES` whose ``line`` applies:

- ``refused``: its preflight or the run's settings refused it; nothing changed there;
- ``failed after the takeover``: as ``failed``, after the takeover stopped trainings (the line
  says how to start each again);
- ``failed``: an operation failed on one of its hosts (its lines above say why);
- ``not verified``: a container's verification failed, or a container was not in this run
  (``--limit``/``--exclude``), so nothing says it works;
- ``waiting``: converged, but changes wait for a running training until the user consents
  (``restart_training=true``);
- ``restart pending``: converged and verified, but the training unit still runs what it ran
  before (an outdated unit or venv build) until the user consents;
- ``verified``: converged and verified.

Each state says whether a run may exit 0 with it (``ok``): refused, failed and not verified may
not (deploy.py's last operation fails the node when nothing else did, see
:func:`pvegpu.operations.fleet.node_outcome`); waiting and a pending restart may: they wait for
the user's consent, nothing failed.

A new state is a function ``NodeRun -> line | None`` and its place in the order:
``add_state(State("takeover failed", False, takeover_line), before="failed")``. What it needs
of the run goes into a :class:`NodeRun` field (gathered in :mod:`pvegpu.output.summary`), or it
reads the run's context (``node_run.context``).

>>> decide(NodeRun("pve1", containers=["@pct/pve1/200"], verdicts={"@pct/pve1/200": True}))
('verified', 'pvegpu: pve1: converged and verified')
>>> decide(NodeRun("pve1", containers=["@pct/pve1/200"], in_run={"pve1"}))[1]
... # doctest: +NORMALIZE_WHITESPACE
'pvegpu: pve1: converged, not verified: CT 200 was not in this run (--limit or --exclude left
it out): deploy again without leaving it out, or run verify.py'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..plan.restart_hint import hint_texts
from ..plan.running_training import summary_line

#: The flag a user adds to consent to what waits for a running training.
CONSENT = "--data restart_training=true"


@dataclass
class NodeRun:
    """What one node's hosts did in this run (host names: the node's, ``@pct/<node>/<vmid>``)."""

    node: str
    #: its training container hosts in the fleet
    containers: list[str] = field(default_factory=list)
    #: the node's hosts this run deployed (None: all of them; --limit/--exclude leave some out)
    in_run: set[str] | None = None
    #: its preflight's problem lines (or the run's bad settings): nothing changed there
    refused: list[str] = field(default_factory=list)
    #: {host: the first operation that failed on it}
    failed: dict[str, str] = field(default_factory=dict)
    #: {container host: whether its verification passed}, for those verified in this run
    verdicts: dict[str, bool] = field(default_factory=dict)
    #: {container host: why its training unit's restart is pending}
    pending: dict[str, list[str]] = field(default_factory=dict)
    #: the changes that wait for a running training, and that training (a Trainer)
    waiting: list[str] = field(default_factory=list)
    waiting_for: Any = None
    #: the run's context (pvegpu.run.run_context.RunContext): for states added later
    context: Any = None

    def ran(self, host: str) -> bool:
        return self.in_run is None or host in self.in_run


@dataclass(frozen=True)
class State:
    """A closing state: its name, whether the run may exit 0 with it, and its line (None: the
    state does not apply to this node's run)."""

    name: str
    ok: bool
    line: Callable[[NodeRun], str | None]


def ct(host: str) -> str:
    """``@pct/pve1/200`` -> ``CT 200`` (any other name as it is)."""
    return f"CT {host.rsplit('/', 1)[1]}" if host.startswith("@pct/") else host


def more(lines: list[str]) -> str:
    return f" (+{len(lines) - 1} more above)" if len(lines) > 1 else ""


def refused(r: NodeRun) -> str | None:
    if not r.refused:
        return None
    return f"pvegpu: {r.node}: refused, nothing changed there: {r.refused[0]}{more(r.refused)}"


def failed(r: NodeRun) -> str | None:
    ops = {h: op for h, op in r.failed.items() if r.verdicts.get(h) is not False}
    if not ops:
        return None
    where = "; ".join(f"{h} at {op!r}" for h, op in sorted(ops.items()))
    return f"pvegpu: {r.node}: FAILED: {where} (its lines above say why)"


def failed_after_takeover(r: NodeRun) -> str | None:
    """A failure after the takeover stopped trainings: the user must know they are stopped and
    how to start each again (nothing restarts them)."""
    line = failed(r)
    hints = hint_texts(r.context, r.node) if r.context else None
    if line is None or not hints:
        return None
    return f"{line}; the takeover had stopped {len(hints)} training(s): start again with " + (
        " ; ".join(f"`{h}`" for h in hints)
    )


def not_verified(r: NodeRun) -> str | None:
    bad = sorted(h for h, ok in r.verdicts.items() if ok is False)
    if bad:
        cts = " and ".join(ct(h) for h in bad)
        return (
            f"pvegpu: {r.node}: not verified: the verification of {cts} failed (its lines above "
            "say why); nothing that failed it went live"
        )
    left_out = [h for h in r.containers if not r.ran(h)]
    if left_out:
        cts = " and ".join(ct(h) for h in left_out)
        were = "were" if len(left_out) > 1 else "was"
        it = "them" if len(left_out) > 1 else "it"
        return (
            f"pvegpu: {r.node}: converged, not verified: {cts} {were} not in this run (--limit "
            f"or --exclude left {it} out): deploy again without leaving {it} out, or run "
            "verify.py"
        )
    unverified = [h for h in r.containers if h not in r.verdicts]
    if unverified:
        return (
            f"pvegpu: {r.node}: not verified: no verification of "
            f"{' and '.join(ct(h) for h in unverified)} ran in this run"
        )
    return None


def waiting(r: NodeRun) -> str | None:
    if not r.waiting or r.waiting_for is None:
        return None
    return summary_line(r.node, len(r.waiting), r.waiting_for)


def restart_pending(r: NodeRun) -> str | None:
    if not r.pending:
        return None
    why = "; ".join(f"{ct(h)}: {', '.join(reasons)}" for h, reasons in sorted(r.pending.items()))
    return (
        f"pvegpu: {r.node}: converged and verified; the training's restart is pending ({why}): "
        f"rerun with {CONSENT} to restart it"
    )


def verified(r: NodeRun) -> str:
    if not r.containers:
        return f"pvegpu: {r.node}: converged (no training container)"
    if not r.ran(r.node):
        return (
            f"pvegpu: {r.node}: {' and '.join(ct(h) for h in r.containers)} converged and "
            "verified; the node's own stage was not in this run (--limit or --exclude)"
        )
    return f"pvegpu: {r.node}: converged and verified"


#: The closing states, the first that applies wins.
STATES: list[State] = [
    State("refused", False, refused),
    State("failed after the takeover", False, failed_after_takeover),
    State("failed", False, failed),
    State("not verified", False, not_verified),
    State("waiting", True, waiting),
    State("restart pending", True, restart_pending),
    State("verified", True, verified),
]


def add_state(state: State, before: str) -> None:
    """Insert ``state`` into :data:`STATES` just before the state named ``before``."""
    names = [s.name for s in STATES]
    STATES.insert(names.index(before), state)


def decide(r: NodeRun) -> tuple[str, str]:
    """(the state's name, the node's closing line): the first state of :data:`STATES` that
    applies (``verified`` always does)."""
    for state in STATES:
        line = state.line(r)
        if line is not None:
            return state.name, line
    raise AssertionError("the last state applies to every run")  # pragma: no cover


def ok(name: str) -> bool:
    """Whether a run may exit 0 with a node in state ``name``."""
    return next(s.ok for s in STATES if s.name == name)
