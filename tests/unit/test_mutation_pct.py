"""The @pct connector's pure parts (host names, pct's own errors): behaviours the mutation run
(bench/mutation.py) found unpinned."""

import pytest
from pyinfra.api.exceptions import InventoryError

from pvegpu.connectors.pct import explain_pct_error, parse_pct_name


def test_a_missing_container_names_node_vmid_and_the_fix():
    stderr = "Configuration file 'nodes/pve1/lxc/200.conf' does not exist"
    assert explain_pct_error("127.0.0.1", 200, stderr) == (
        "container 200 does not exist on node 127.0.0.1: "
        "create it by running deploy.py (or check CT_ID / the fleet file)"
    )


@pytest.mark.parametrize("vmid", [100, 999999999])
def test_the_vmid_range_proxmox_allows_is_accepted(vmid):
    assert parse_pct_name(f"127.0.0.1/{vmid}") == ("127.0.0.1", vmid)


@pytest.mark.parametrize("vmid", ["99", "1000000000"])
def test_a_vmid_outside_proxmox_range_is_refused(vmid):
    with pytest.raises(InventoryError, match=f"invalid @pct host '127.0.0.1/{vmid}'"):
        parse_pct_name(f"127.0.0.1/{vmid}")
