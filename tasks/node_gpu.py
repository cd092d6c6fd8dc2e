# Stage 1, on each Proxmox node: NVIDIA devices that come back by themselves after every boot.
# (Driver presence, version, GPU count and tools were checked by the preflight in deploy.py; the
# data directory is created with the container that mounts it, in tasks/container.py.)
from pyinfra import host

from pvegpu.operations import proxmox
from pvegpu.startup.deploy_context import settings

s = settings(host)

proxmox.boot_persistence(
    name="Load NVIDIA modules, create GPU and uvm nodes before guests start, "
    "run nvidia-persistenced",
    gpus=s.gpus,
)
