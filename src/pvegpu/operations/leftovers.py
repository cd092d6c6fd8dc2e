"""Clearing what is left of pvegpu's training unit before it starts: the processes still in
its control group in this container (a worker that outlived its unit), ended on the container's
node (only the node sees which process holds which GPU), each signal logged there.
"""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api import FunctionCommand, StringCommand
from pyinfra.api.exceptions import FactProcessError

from ..facts.probe import parse_probe_output, probe_command
from ..plan.unit import training_matcher, unit_file
from ..settings import Settings

# What the deploy ever killed on a node, one JSON line per signal.
LEFTOVER_LOG = "/var/log/pvegpu/training-leftovers.log"


def gpu_list(gpus) -> str:
    return ",".join(str(g) for g in sorted(gpus))


def clear_leftovers_command(settings: Settings, unit_name: str | None = None) -> FunctionCommand:
    """End leftover training processes of ``unit_name`` (default: the training unit) on the
    training GPUs, on the container's node. Processes of any other service are left alone."""
    unit = unit_name or unit_file(settings.training)

    def clear(state, host):
        node_name = host.data.get("pct_node")
        node = host.inventory.get_host(node_name, None) if node_name else None
        if node is None:
            host.log_styled(
                f"cannot clear leftover training processes: node host {node_name!r} is not in the "
                "inventory (container hosts are @pct/<node>/<vmid>)",
                fg="red",
                log_func=logger.error,
            )
            return False
        args = {
            "vmid": int(host.data.get("pct_vmid")),
            "unit": unit,
            "gpus": sorted(settings.gpus.training),
            "match": training_matcher(settings),
            "term_wait_s": 30,
            "log": LEFTOVER_LOG,
        }
        status, output = node.run_shell_command(
            StringCommand(probe_command("training_leftovers", args))
        )
        try:
            doc = (
                parse_probe_output("training_leftovers", list(output.stdout_lines))
                if status
                else {}
            )
        except FactProcessError as e:
            doc = {"error": str(e)}
        if not status or doc.get("error"):
            reason = doc.get("error") or " ".join(output.stderr_lines[-3:]) or "no output"
            host.log_styled(
                f"clearing leftover training processes on {node_name} failed: {reason}",
                fg="red",
                log_func=logger.error,
            )
            return False
        for p in doc["killed"]:
            host.log_styled(
                f"ended leftover training process {p['pid']} on GPU {gpu_list(p['gpus'])} "
                f"({' '.join(p['argv'])})",
                fg="yellow",
                log_func=logger.warning,
            )
        for p in doc["foreign"]:
            host.log_styled(
                f"GPU {gpu_list(p['gpus'])} is also used by process {p['pid']} "
                f"({' '.join(p['argv']) or '?'}): not {unit}'s training, left alone",
                fg="yellow",
                log_func=logger.warning,
            )
        for p in doc["remaining"]:
            host.log_styled(
                f"leftover training process {p['pid']} on GPU {gpu_list(p['gpus'])} survived "
                f"SIGKILL: not starting {unit_file(settings.training)}; check it on {node_name} "
                f"(`ps -o stat= {p['pid']}`)",
                fg="red",
                log_func=logger.error,
            )
        return not doc["remaining"]

    return FunctionCommand(clear, (), {})
