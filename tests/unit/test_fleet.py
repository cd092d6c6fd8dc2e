import os
import subprocess
import sys
from pathlib import Path

import pytest

from pvegpu.fleet import FleetError, inventory_groups, load_fleet

ROOT = Path(__file__).resolve().parents[2]


def test_env_configures_one_node_and_container():
    nodes = load_fleet({"PVE_HOST": "127.0.0.1", "PVE_SSH_PORT": "2222", "CT_ID": "201",
                        "PVE_SSH_KEY": "/k"}, ROOT)
    pve, cts = inventory_groups(nodes)
    assert pve == [("127.0.0.1", {"ssh_port": 2222, "ssh_user": "root", "ssh_key": "/k",
                                  "pve_ct_ids": [201]})]
    assert cts[0][0] == "@pct/127.0.0.1/201"
    assert cts[0][1]["ssh_port"] == 2222


def test_fleet_file(tmp_path):
    f = tmp_path / "fleet.yaml"
    f.write_text("nodes:\n  - address: 127.0.0.2\n    ssh_port: 2200\n    containers: [200, 201]\n")
    pve, cts = inventory_groups(load_fleet({"PVE_FLEET": str(f)}, tmp_path))
    assert [h for h, _ in cts] == ["@pct/127.0.0.2/200", "@pct/127.0.0.2/201"]


def test_example_fleet_file_parses_but_is_never_a_default(tmp_path):
    nodes = load_fleet({"PVE_FLEET": str(ROOT / "fleet.example.yaml")}, tmp_path)
    assert nodes[0].containers == (200,)
    with pytest.raises(FleetError, match="no Proxmox node configured"):
        load_fleet({}, tmp_path)


@pytest.mark.parametrize("text, fragment", [
    ("nodes: []\n", "has no `nodes:` list"),
    ("nodes:\n  - ssh_port: 22\n", "has no address"),
    ("nodes:\n  - address: 127.0.0.1\n    ssh_port: abc\n", "ssh_port='abc'"),
    ("nodes: [\n", "not valid YAML"),
])
def test_bad_fleet_files(tmp_path, text, fragment):
    f = tmp_path / "fleet.yaml"
    f.write_text(text)
    with pytest.raises(FleetError, match=fragment.replace("[", r"\[").replace("(", r"\(")):
        load_fleet({}, tmp_path)


def test_inventory_without_configuration_errors_and_connects_nowhere(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_", "CT_ID"))}
    # debug-inventory loads the inventory only; a connection attempt would show as "Connecting".
    p = subprocess.run(
        [sys.executable, "-m", "pyinfra", "inventory.py", "debug-inventory"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    out = p.stdout + p.stderr
    assert p.returncode != 0
    assert "no Proxmox node configured: export PVE_HOST=" in out
    assert "python -m sim demo" in out
    example_node = load_fleet({"PVE_FLEET": str(ROOT / "fleet.example.yaml")}, ROOT)[0].address
    assert "Connecting" not in out and example_node not in out
