"""One closing line per node of a deploy: what happened to it and its containers, and for a failed
one the first reason, so a fleet run's outcome is readable after pyinfra's per-operation output.

>>> node_line("10.1.2.6", [], {})
'pvegpu: 10.1.2.6: converged and verified'
>>> node_line("10.1.2.7", ["10.1.2.7: driver 570.86.10 is too old"], {})
'pvegpu: 10.1.2.7: FAILED, nothing changed there: 10.1.2.7: driver 570.86.10 is too old'
>>> node_line("n", [], {"@pct/n/200": "Build venv torch-2.11.0-cu130"})
"pvegpu: n: FAILED: @pct/n/200 at 'Build venv torch-2.11.0-cu130' (its lines above say why)"
"""

from __future__ import annotations

import atexit
import sys

from pyinfra.api.state import BaseStateCallback

from ..plan.running_training import summary_line
from ..run.adoption import waiting
from ..run.run_context import run_context


def node_line(node: str, preflight: list[str], failed_ops: dict[str, str]) -> str:
    """The summary line of one node (``failed_ops``: {host name: first failed operation})."""
    if preflight:
        more = f" (+{len(preflight) - 1} more above)" if len(preflight) > 1 else ""
        return f"pvegpu: {node}: FAILED, nothing changed there: {preflight[0]}{more}"
    if failed_ops:
        where = "; ".join(f"{h} at {op!r}" for h, op in sorted(failed_ops.items()))
        return f"pvegpu: {node}: FAILED: {where} (its lines above say why)"
    return f"pvegpu: {node}: converged and verified"


class _FailedOps(BaseStateCallback):
    """Records, per host, the first operation that failed on it, and whether anything ran."""

    # pyinfra declares the hooks static but calls them on the registered instance, so these
    # methods keep their state on self (hence the type: ignore[override]).

    def __init__(self):
        self.failed: dict[str, str] = {}
        self.executed = False

    def operation_start(self, state, op_hash):  # type: ignore[override]
        self.executed = True

    def operation_host_error(  # type: ignore[override]
        self, state, host, op_hash, retry_count=0, max_retries=0
    ):
        if retry_count < max_retries:
            return
        names = state.get_op_meta(op_hash).names
        self.failed.setdefault(host.name, ", ".join(sorted(names)) or op_hash)

    def host_connect_error(self, state, host, error):  # type: ignore[override]
        self.failed.setdefault(host.name, f"connect ({error})")


def node_failures(state) -> dict[str, list[str]]:
    """{node name: problem lines} of the nodes that must not be touched in this run (written by
    :func:`pvegpu.startup.preflight.check_fleet`; here, below it, so the summary can read them)."""
    return run_context(state).node_failures


def summary_lines(state, recorder: _FailedOps) -> list[str]:
    failures = node_failures(state)
    lines = []
    for node in state.inventory.get_group("pve_hosts", []):
        hosts = [node.name] + [
            h.name
            for h in state.inventory.get_group("training_cts", [])
            if h.data.get("pct_node") == node.name
        ]
        ops = {h: recorder.failed[h] for h in hosts if h in recorder.failed}
        ops.update(
            {
                h.name: "(stopped)"
                for h in state.failed_hosts
                if h.name in hosts and h.name not in ops
            }
        )
        line = node_line(node.name, failures.get(node.name, []), ops)
        changes, trainer = waiting(state, node.name)
        if line.endswith(": converged and verified") and changes and trainer is not None:
            line = summary_line(node.name, len(changes), trainer)
        lines.append(line)
    return lines


def register(state) -> None:
    """Print the per-node summary when this pyinfra run ends (once per run)."""
    run = run_context(state)
    if run.summary is not None:
        return
    recorder = run.summary = _FailedOps()
    state.add_callback_handler(recorder)

    def report():
        if recorder.executed or node_failures_any(state):
            for line in summary_lines(state, recorder):
                print(line, file=sys.stderr)

    atexit.register(report)


def node_failures_any(state) -> bool:
    return bool(node_failures(state))
