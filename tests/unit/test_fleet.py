import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pvegpu.startup.fleet import FleetError, inventory_groups, load_fleet

ROOT = Path(__file__).resolve().parents[2]


def test_env_configures_one_node_and_container(key):
    nodes = load_fleet(
        {"PVE_HOST": "127.0.0.1", "PVE_SSH_PORT": "2222", "CT_ID": "201", "PVE_SSH_KEY": key}, ROOT
    )
    pve, cts = inventory_groups(nodes)
    assert pve == [
        ("127.0.0.1", {"ssh_port": 2222, "ssh_user": "root", "ssh_key": key, "pve_ct_ids": [201]})
    ]
    assert cts[0][0] == "@pct/127.0.0.1/201"
    assert cts[0][1]["ssh_port"] == 2222


def test_fleet_file(tmp_path):
    f = tmp_path / "fleet.yaml"
    f.write_text("nodes:\n  - address: 127.0.0.2\n    ssh_port: 2200\n    containers: [200, 201]\n")
    pve, cts = inventory_groups(load_fleet({"PVE_FLEET": str(f)}, tmp_path))
    assert [h for h, _ in cts] == ["@pct/127.0.0.2/200", "@pct/127.0.0.2/201"]


def test_example_fleet_file_parses_but_is_never_a_default(tmp_path, key):
    nodes = load_fleet({"PVE_FLEET": str(ROOT / "fleet.example.yaml")}, tmp_path)
    assert nodes[0].containers == (200,)
    with pytest.raises(FleetError, match="no Proxmox node configured"):
        load_fleet({}, tmp_path)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("nodes: []\n", "has no `nodes:` list"),
        ("nodes:\n  - ssh_port: 22\n", "has no address"),
        ("nodes:\n  - address: 127.0.0.1\n    ssh_port: abc\n", "ssh_port='abc'"),
        ("nodes: [\n", "not valid YAML"),
    ],
)
def test_bad_fleet_files(tmp_path, text, fragment):
    f = tmp_path / "fleet.yaml"
    f.write_text(text)
    with pytest.raises(FleetError, match=fragment.replace("[", r"\[").replace("(", r"\(")):
        load_fleet({}, tmp_path)


def test_inventory_without_configuration_errors_and_connects_nowhere(tmp_path, key):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_", "CT_ID"))}
    # debug-inventory loads the inventory only; a connection attempt would show as "Connecting".
    p = subprocess.run(
        [sys.executable, "-m", "pyinfra", "inventory.py", "debug-inventory"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = p.stdout + p.stderr
    assert p.returncode != 0
    assert "no Proxmox node configured: export PVE_HOST=" in out
    assert "python -m sim demo" in out
    example_node = load_fleet({"PVE_FLEET": str(ROOT / "fleet.example.yaml")}, ROOT)[0].address
    assert "Connecting" not in out and example_node not in out


@pytest.fixture
def key(tmp_path, monkeypatch):
    """A private key file, and a HOME whose ~/.ssh/id_ed25519 exists (as fleet.example.yaml
    says)."""
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("key\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    return str(tmp_path / ".ssh" / "id_ed25519")


@pytest.mark.parametrize(
    "env, fragment",
    [
        ({"PVE_SSH_PORT": "99999"}, "PVE_SSH_PORT=99999 in the environment is outside 1..65535"),
        ({"PVE_SSH_PORT": "0"}, "PVE_SSH_PORT=0 in the environment is outside 1..65535"),
        ({"PVE_SSH_PORT": "22x"}, "PVE_SSH_PORT='22x' in the environment is not a number"),
        ({"CT_ID": "99"}, "CT_ID=99 in the environment is outside 100..999999999"),
        (
            {"PVE_SSH_KEY": "/no/such/key"},
            "PVE_SSH_KEY=/no/such/key in the environment does not exist",
        ),
    ],
)
def test_bad_environment_is_one_line(env, fragment):
    with pytest.raises(FleetError) as e:
        load_fleet({"PVE_HOST": "127.0.0.1", **env}, ROOT)
    assert str(e.value).splitlines() == [str(e.value)] and fragment in str(e.value)


def test_an_existing_key_file_is_accepted(key):
    assert load_fleet({"PVE_HOST": "127.0.0.1", "PVE_SSH_KEY": "~/.ssh/id_ed25519"}, ROOT)[
        0
    ].ssh_key


@pytest.mark.parametrize(
    "text, fragment",
    [
        (
            "nodes:\n  - address: 127.0.0.1\n    containers: [200, 201, 200]\n",
            "CT 200 of node 127.0.0.1 is listed twice",
        ),
        (
            "nodes:\n  - address: 127.0.0.1\n  - address: 127.0.0.1\n    containers: [201]\n",
            "node 127.0.0.1 is listed twice",
        ),
        ("nodes:\n  - address: 127.0.0.1\n    ssh_port: 70000\n", "ssh_port=70000 in"),
        ("nodes:\n  - address: 127.0.0.1\n    ssh_key: /no/such/key\n", "ssh_key=/no/such/key in"),
        ("nodes:\n  - address: 127.0.0.1\n    containers: [2.5]\n", "containers=2.5 in"),
    ],
)
def test_duplicates_and_bad_values_in_the_fleet_file(tmp_path, text, fragment):
    f = tmp_path / "fleet.yaml"
    f.write_text(text)
    with pytest.raises(FleetError, match=re.escape(fragment)):
        load_fleet({}, tmp_path)


def test_a_bad_port_stops_pyinfra_with_one_line_and_no_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_", "CT_ID"))}
    env.update(PVE_HOST="127.0.0.1", PVE_SSH_PORT="99999")
    p = subprocess.run(
        [sys.executable, "-m", "pyinfra", "inventory.py", "debug-inventory"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "PVE_SSH_PORT=99999 in the environment is outside 1..65535" in out
    assert "Traceback" not in out and "Connecting" not in out


def test_a_known_hosts_file_from_the_env_or_the_fleet_file_makes_checking_strict(tmp_path, key):
    pinned = tmp_path / "known_hosts"
    pinned.write_text("[127.0.0.1]:2222 ssh-ed25519 AAAA\n")
    f = tmp_path / "fleet.yaml"
    f.write_text(
        f"nodes:\n  - address: 127.0.0.2\n    ssh_known_hosts_file: {pinned}\n"
        "  - address: 127.0.0.3\n"
    )
    for env in (
        {"PVE_HOST": "127.0.0.1", "PVE_SSH_KNOWN_HOSTS": str(pinned)},
        {"PVE_FLEET": str(f)},
    ):
        pve, cts = inventory_groups(load_fleet(env, tmp_path))
        for data in (pve[0][1], cts[0][1]):  # the node and its container host alike
            assert data["ssh_known_hosts_file"] == str(pinned), data
            assert data["ssh_strict_host_key_checking"] == "yes", data
    # a node without one records its first key (pyinfra's default policy), not strict
    assert "ssh_strict_host_key_checking" not in pve[1][1]
    f.write_text("nodes:\n  - address: 127.0.0.2\n    ssh_known_hosts_file: /no/such/file\n")
    with pytest.raises(FleetError, match="ssh_known_hosts_file=/no/such/file is not a readable"):
        load_fleet({}, tmp_path)


def test_ungrouped_hosts_are_named_and_grouped_ones_pass():
    from types import SimpleNamespace as H

    from pvegpu.startup.fleet import ungrouped_host_problems

    node = H(name="127.0.0.1", groups=["pve_hosts"], data={})
    ct = H(
        name="@pct/127.0.0.1/200", groups=["@pct", "training_cts"], data={"pct_node": "127.0.0.1"}
    )
    assert ungrouped_host_problems([node, ct]) == []
    # a training container whose node host is not in the run: no lock, no preflight for it
    orphan = H(
        name="@pct/127.0.0.2/201", groups=["@pct", "training_cts"], data={"pct_node": "127.0.0.2"}
    )
    adhoc = H(name="@pct/127.0.0.1/202", groups=["@pct"], data={"pct_node": "127.0.0.1"})
    lines = ungrouped_host_problems([node, ct, orphan, adhoc])
    assert lines == [
        "@pct/127.0.0.2/201: its node 127.0.0.2 is not a pve_hosts host of this run, so the "
        "node's deploy lock and preflight would not cover it: run `pyinfra inventory.py "
        "deploy.py` (PVE_HOST and CT_ID, or fleet.yaml, name both)",
        "@pct/127.0.0.1/202: in neither pve_hosts nor training_cts, so deploy.py would change "
        "nothing there: run `pyinfra inventory.py deploy.py` (PVE_HOST and CT_ID, or fleet.yaml, "
        "name both)",
    ]
