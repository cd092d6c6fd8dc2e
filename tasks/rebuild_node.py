# rebuild=container, on each node: destroy its training containers; the container stage that
# follows re-creates them from the template. The data dir is a bind mount and survives.
from pyinfra import host

from pvegpu.operations import rebuild
from pvegpu.startup.deploy_context import container_settings

for vmid in host.data.get("pve_ct_ids") or []:
    rebuild.container_destroyed(
        name=f"Destroy CT {vmid} for rebuild=container",
        vmid=vmid,
        settings=container_settings(host, vmid),
    )
