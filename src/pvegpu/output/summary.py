"""One closing line per node of a deploy, printed last: what is true of the node and its
containers after this run (the states and their lines: :mod:`pvegpu.output.outcome`), so a fleet
run's outcome is readable after pyinfra's per-operation output.

>>> node_line("10.1.2.6", [], {})
'pvegpu: 10.1.2.6: converged (no training container)'
>>> node_line("10.1.2.7", ["10.1.2.7: driver 570.86.10 is too old"], {})
'pvegpu: 10.1.2.7: refused, nothing changed there: 10.1.2.7: driver 570.86.10 is too old'
>>> node_line("n", [], {"@pct/n/200": "Build venv torch-2.11.0-cu130"})
"pvegpu: n: FAILED: @pct/n/200 at 'Build venv torch-2.11.0-cu130' (its lines above say why)"
"""

from __future__ import annotations

import atexit
import sys

from pyinfra.api.state import BaseStateCallback

from ..run.adoption import waiting
from ..run.run_context import run_context
from .outcome import NodeRun, decide


def node_line(node: str, preflight: list[str], failed_ops: dict[str, str]) -> str:
    """The summary line of a node without containers (``failed_ops``: {host name: first failed
    operation})."""
    return decide(NodeRun(node, refused=preflight, failed=failed_ops))[1]


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


def node_run(state, node, recorder: _FailedOps) -> NodeRun:
    """What ``node``'s hosts (a pyinfra host of group pve_hosts, and its containers) did."""
    run = run_context(state)
    containers = [
        h.name
        for h in state.inventory.get_group("training_cts", [])
        if h.data.get("pct_node") == node.name
    ]
    hosts = [node.name, *containers]
    failed = {h.name: "(stopped)" for h in state.failed_hosts if h.name in hosts}
    failed.update({h: recorder.failed[h] for h in hosts if h in recorder.failed})
    for h in run.failed_for_outcome:  # failed to say what the closing line says
        failed.pop(h, None)
    refused = node_failures(state).get(node.name, [])
    if run.preflight_error is not None:  # the run's settings: nothing ran anywhere
        refused = [refusal_line(run.preflight_error)]
    changes, trainer = waiting(state, node.name)
    return NodeRun(
        node.name,
        containers=containers,
        in_run={h.name for h in state.activated_hosts} | set(recorder.failed),
        refused=refused,
        failed=failed,
        verdicts={h: v.ok for h, v in run.verdicts.items() if h in containers},
        pending={h: r for h, r in run.restart_pending.items() if h in containers},
        waiting=changes,
        waiting_for=trainer,
        context=run,
    )


def refusal_line(error: Exception) -> str:
    """What a refusal of the whole run (bad settings) says on each node's line.

    >>> from pvegpu.settings import SettingsError
    >>> refusal_line(SettingsError("bad settings, nothing was changed:\\na\\nb"))
    'bad settings (2 problems above)'
    """
    title, problems = getattr(error, "title", None), getattr(error, "problems", None)
    if title is None or problems is None:
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    title = title.split(", nothing was changed")[0]
    return f"{title} ({len(problems)} problem{'s' if len(problems) != 1 else ''} above)"


def summary_lines(state, recorder: _FailedOps) -> list[str]:
    """One line per node with a host in this run (``--limit`` may leave whole nodes out)."""
    lines = []
    for node in state.inventory.get_group("pve_hosts", []):
        r = node_run(state, node, recorder)
        if r.in_run is not None and not r.in_run & {node.name, *r.containers}:
            continue
        lines.append(decide(r)[1])
    return lines


def register(state) -> None:
    """Print the per-node summary when this pyinfra run ends (once per run)."""
    run = run_context(state)
    if run.summary is not None:
        return
    recorder = run.summary = _FailedOps()
    state.add_callback_handler(recorder)

    def report():
        if recorder.executed or node_failures_any(state) or run.preflight_error is not None:
            for line in summary_lines(state, recorder):
                print(line, file=sys.stderr)

    atexit.register(report)


def node_failures_any(state) -> bool:
    return bool(node_failures(state))
