# With --data restart_training=true, on each node, once the verify stage accepted the new builds:
# stop the trainings pvegpu did not start, gracefully and whole, and disable what would start one
# at boot (pvegpu.operations.takeover); then apply the container changes that waited for it
# (tasks/container.py again: each operation does only what is still to do). The venv switch and
# pvegpu's unit follow (tasks/training_unit.py).
from pyinfra import host, local

from pvegpu.operations import takeover
from pvegpu.startup.deploy_context import container_settings

for vmid in host.data.get("pve_ct_ids") or []:
    s = container_settings(host, vmid)
    takeover.training_taken_over(
        name=f"Take over the training running in CT {vmid} once its new build is verified "
        "(restart_training=true)",
        vmid=vmid,
        settings=s,
    )
local.include("tasks/container.py")
