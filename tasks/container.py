# Stage 2, on each Proxmox node: its training containers exist, pass the GPUs through, run, and
# carry exactly the node's driver userspace.
from pyinfra import host

from pvegpu.deploy_context import settings
from pvegpu.operations import proxmox

s = settings(host)

for vmid in host.data.get("pve_ct_ids") or []:
    proxmox.container_present(
        name=f"Create CT {vmid} when missing; keep {s.data_dir_node} mounted at {s.data_dir_ct} "
        f"and protection on",
        vmid=vmid, settings=s,
    )
    proxmox.gpu_passthrough(
        name=f"Pass GPUs 0-{s.expected_gpu_count - 1} through to CT {vmid} and run it",
        vmid=vmid, settings=s,
    )
    proxmox.driver_userspace(
        name=f"Match CT {vmid}'s NVIDIA userspace to the node's driver", vmid=vmid, settings=s
    )
