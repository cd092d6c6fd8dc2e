"""Node facts: Proxmox, NVIDIA driver, GPUs, device nodes and majors, container configs."""

from __future__ import annotations

from .probe import ProbeFact


class NodeState(ProbeFact):
    """Everything the node stages compare against, in one command (one JSON document).

    .. code:: python

        state = host.get_fact(NodeState, vmids=[200], installer_dir="/root",
                              data_dir="/tank/dflash", boot_files=[])
        state["driver_version"], state["majors"]["nvidia-uvm"], state["containers"]["200"]["status"]

    Majors come from /proc/devices (uvm and caps are dynamic, never hard-coded); device nodes
    from stat() of /dev/nvidia*; GPUs from `nvidia-smi --query-gpu ... --format=csv`.
    """

    probe = "node_state"

    def command(self, vmids=(), installer_dir="/root", data_dir="/", boot_files=()):
        return self.command_for(
            vmids=list(vmids), installer_dir=installer_dir, data_dir=data_dir,
            boot_files=list(boot_files),
        )

    @staticmethod
    def default():
        return {}
