# Stage 1, on each Proxmox node: the data directory that outlives every container rebuild.
# (Driver presence, version and GPU count were checked by the preflight in deploy.py.)
from pyinfra import host
from pyinfra.operations import files

from pvegpu.deploy_context import settings

s = settings(host)

files.directory(
    name=f"Data directory {s.data_dir_node} for checkpoints, datasets and compile caches",
    path=s.data_dir_node,
    present=True,
)
