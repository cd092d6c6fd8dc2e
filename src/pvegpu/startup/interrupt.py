"""What a deploy says when it is cut short: Ctrl-C (SIGINT) or SIGTERM.

pyinfra's own handling of SIGINT ends the run quietly and may let it print its summary, so a
deploy cut short in a takeover ended "converged and verified", exit 0, while the takeover had
not finished and pvegpu's unit was never started. Instead each node gets one last line that says
the run was interrupted, what still runs on the node (a takeover's stop goes on there until its
checkpoints are written, holding the node: probes/training_stop.py) and how to start the
trainings the takeover stopped; the exit status is the shell's for the signal (130, 143).

>>> from types import SimpleNamespace
>>> run = SimpleNamespace(stopping={"n1": "the running training (pid 7, started by hand)"},
...                       taken_over={})
>>> interrupt_line("n1", signal.SIGINT, run)[:52]
'pvegpu: n1: INTERRUPTED (SIGINT), not converged: the'
"""

from __future__ import annotations

import os
import signal
import sys

from ..plan.restart_hint import hint_texts
from ..run.run_context import run_context

#: the exit status of a run cut short by each signal (128 + its number, as a shell says)
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


def install(state) -> None:
    """Handle SIGINT and SIGTERM for this run (once): :func:`interrupted`. A Python-level
    handler, as pyinfra's own for SIGINT (pyinfra_cli/main.py ``_handle_interrupt``: it prints
    "Exiting upon user request!" and exits 0), which it replaces: a Python handler's sigaction
    also shadows a gevent signal watcher of the same signal."""
    run = run_context(state)
    if run.interrupt_handled:
        return
    run.interrupt_handled = True
    for sig in EXIT:
        signal.signal(sig, lambda signum, frame: interrupted(state, signum))


def interrupted(state, sig) -> None:
    """Print every node's last line and end the run now, with the signal's exit status (the
    node's deploy lock goes with the connection; a stop in progress goes on on the node)."""
    run = run_context(state)
    nodes = [h.name for h in state.inventory.get_group("pve_hosts", [])]
    for node in nodes:
        print(interrupt_line(node, sig, run), flush=True)
    sys.stderr.flush()
    os._exit(EXIT[sig])


def interrupt_line(node: str, sig, run) -> str:
    """One node's last line after ``sig`` cut the run short."""
    name = signal.Signals(sig).name
    line = (
        f"pvegpu: {node}: INTERRUPTED ({name}), not converged: the run ended before its last step"
    )
    stopping = (run.stopping or {}).get(node)
    if stopping:
        line += (
            f"; the takeover's stop of {stopping} goes on on the node until its checkpoints are "
            "written (it holds the node until then): run the deploy again once it ends"
        )
    hints = hint_texts(run, node)
    if hints:
        done = "is stopping" if stopping else "had stopped"
        line += (
            f"; the takeover {done} {len(hints)} training(s): to run them again instead of "
            "pvegpu's unit, start them with " + " ; ".join(hints)
        )
    if not stopping and not hints:
        line += ": run the deploy again to finish it"
    return line
