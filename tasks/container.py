# Stage 2, on each Proxmox node: its training containers exist, pass the GPUs through, run, and
# carry exactly the node's driver userspace.
from pyinfra import host

from pvegpu.operations import container_software, proxmox
from pvegpu.startup.deploy_context import container_settings

for vmid in host.data.get("pve_ct_ids") or []:
    s = container_settings(host, vmid)  # the fleet file may give a container its own settings
    ct = s.container
    proxmox.container_present(
        name=f"Create CT {vmid} when missing; keep {ct.data_dir_node} mounted at "
        f"{ct.data_dir_ct} and protection on",
        vmid=vmid,
        container=s.container,
        policy=s.policy,
        training=s.training,
        progress_interval_s=s.policy.progress_interval_s,
    )
    proxmox.gpu_passthrough(
        name=f"Pass GPUs 0-{s.gpus.expected_count - 1} through to CT {vmid} and run it",
        vmid=vmid,
        gpus=s.gpus,
        policy=s.policy,
        training=s.training,
    )
    container_software.driver_userspace(
        name=f"Match CT {vmid}'s NVIDIA userspace to the node's driver",
        vmid=vmid,
        gpus=s.gpus,
        progress_interval_s=s.policy.progress_interval_s,
        policy=s.policy,
    )
    container_software.compile_toolchain(
        name=f"Give CT {vmid} a C compiler and Python headers for torch.compile",
        vmid=vmid,
        policy=s.policy,
    )
