# The fleet: Proxmox nodes (group pve_hosts, over SSH) and their training containers
# (group training_cts, @pct/<node>/<vmid>). Configured from PVE_HOST/PVE_SSH_PORT/PVE_SSH_USER/
# PVE_SSH_KEY/CT_ID or a fleet file (fleet.yaml, or $PVE_FLEET); see fleet.example.yaml.
import os
from pathlib import Path

from pyinfra import logger

from pvegpu.quick_exit import register as skip_final_collection
from pvegpu.startup.fleet import inventory_groups, load_fleet
from pvegpu.version import VERSION

logger.info(f"--> pvegpu {VERSION}")  # the first line pvegpu prints: which version made a change
skip_final_collection()  # the run's end: no last garbage collection of its objects (0.1-0.5 s)

pve_hosts, training_cts = inventory_groups(load_fleet(os.environ, Path(__file__).parent))
