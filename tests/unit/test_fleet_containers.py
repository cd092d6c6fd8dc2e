"""Issue 22: several training containers on one node, each with its own training GPUs (a fleet
file's `containers:` entry may carry that container's settings); a GPU in two containers'
training sets on one node is refused, one line naming both containers, the GPU and the fix."""

from __future__ import annotations

import pytest
from pyinfra.api import Inventory

import pvegpu.plan.unit
from pvegpu.settings import SettingsError, defaults
from pvegpu.startup.all_settings import load_all
from pvegpu.startup.fleet import FleetError, inventory_groups, load_fleet

TWO = """nodes:
  - address: 127.0.0.2
    torch_variant: cu128
    containers:
      - {vmid: 200, target_gpus: [0, 1, 2], drafter_gpus: [3]}
      - {vmid: 201, target_gpus: [4, 5, 6], drafter_gpus: %s}
"""


def fleet(tmp_path, text):
    f = tmp_path / "fleet.yaml"
    f.write_text(text)
    return inventory_groups(load_fleet({"PVE_FLEET": str(f)}, tmp_path))


def test_a_containers_entry_gives_that_container_its_own_settings(tmp_path):
    pve, cts = fleet(tmp_path, TWO % "[7]")
    assert pve[0][1]["pve_ct_ids"] == [200, 201]
    assert "target_gpus" not in pve[0][1]  # the node's data is the node entry's
    (n200, d200), (n201, d201) = cts
    assert (n200, d200["target_gpus"], d200["drafter_gpus"]) == (
        "@pct/127.0.0.2/200",
        [0, 1, 2],
        [3],
    )
    assert (n201, d201["target_gpus"], d201["drafter_gpus"]) == (
        "@pct/127.0.0.2/201",
        [4, 5, 6],
        [7],
    )
    assert d200["torch_variant"] == d201["torch_variant"] == "cu128"  # the node entry's, inherited


def test_a_containers_entry_without_vmid_is_one_line(tmp_path):
    with pytest.raises(FleetError, match=r"containers entry \{'target_gpus': \[0\]\} has no vmid"):
        fleet(tmp_path, "nodes:\n  - address: 127.0.0.2\n    containers: [{target_gpus: [0]}]\n")


def settings_of(tmp_path, text, monkeypatch):
    monkeypatch.setattr(pvegpu.plan.unit, "unit_problems", lambda s: [])
    pve, cts = fleet(tmp_path, text)
    inv = Inventory(([*pve, *cts], defaults()), pve_hosts=(pve, {}), training_cts=(cts, {}))
    return load_all(list(inv))


def test_disjoint_training_gpus_of_two_containers_pass(tmp_path, monkeypatch):
    settings = settings_of(tmp_path, TWO % "[7]", monkeypatch)
    assert settings["@pct/127.0.0.2/201"].gpus.training == (4, 5, 6, 7)


def test_a_gpu_in_two_containers_training_sets_is_one_line_naming_both(tmp_path, monkeypatch):
    with pytest.raises(SettingsError) as e:
        settings_of(tmp_path, TWO % "[3]", monkeypatch)
    assert str(e.value).splitlines() == [
        "bad settings, nothing was changed:",
        "127.0.0.2: GPU 3 is a training GPU of both CT 200 (drafter_gpus) and CT 201 "
        "(drafter_gpus): give each container of a node its own GPUs (target_gpus and "
        "drafter_gpus in its fleet file `containers:` entry, e.g. {vmid: 201, target_gpus: "
        "[4, 5, 6], drafter_gpus: [7]})",
    ]


def test_two_containers_on_two_nodes_may_use_the_same_gpu_numbers(tmp_path, monkeypatch):
    text = (
        "nodes:\n  - address: 127.0.0.2\n    containers: [200]\n"
        "  - address: 127.0.0.3\n    containers: [200]\n"
    )
    assert len(settings_of(tmp_path, text, monkeypatch)) == 4


def test_a_fleets_nodes_are_locked_and_read_side_by_side(monkeypatch):
    """Issue 22: the preflight took each node's lock and read each node one after the other (a
    fleet's preflight was the sum of its nodes' reads); now every node's starts before any ends."""
    from types import SimpleNamespace as NS

    import gevent

    from pvegpu.settings import Settings
    from pvegpu.startup import preflight

    events = []

    def step(kind, name, result):
        events.append((kind, name))
        gevent.sleep(0)  # the round trip: another greenlet runs meanwhile
        events.append((kind + " done", name))
        return result

    nodes = [NS(name=n, data={"pve_ct_ids": []}) for n in ("a", "b")]

    class FakeInventory:
        def __iter__(self):
            return iter(nodes)

        def get_group(self, group, default=None):
            return nodes if group == "pve_hosts" else []

    inventory = FakeInventory()
    s = Settings.from_data(defaults())
    monkeypatch.setattr(preflight, "load_all", lambda hosts: {"a": s, "b": s})
    monkeypatch.setattr(preflight, "ungrouped_host_problems", lambda hosts: [])
    monkeypatch.setattr(preflight.summary, "register", lambda state: None)
    monkeypatch.setattr(
        preflight.node_lock, "acquire", lambda node, wait: step("lock", node.name, (object(), None))
    )
    monkeypatch.setattr(
        preflight,
        "preflight_read",
        lambda st, inv, settings, node: step("read", node.name, {"gpus": []}),
    )
    monkeypatch.setattr(preflight, "node_problems", lambda *a: ([], []))
    monkeypatch.setattr(preflight, "training_path_problems", lambda *a: [])

    class FakeState:  # a deploy with -y: the locks are taken at its start
        def should_check_for_changes(self):
            return False

    preflight._check_fleet(FakeState(), inventory)
    assert events[:2] == [("lock", "a"), ("lock", "b")]
    reads = [e for e in events if e[0].startswith("read")]
    assert reads[:2] == [("read", "a"), ("read", "b")]


def test_the_node_side_container_stage_uses_each_containers_own_settings(tmp_path, monkeypatch):
    """tasks/container.py creates and passes GPUs to each container with its own fleet entry's
    settings (its own ct_memory_mib, say), the node's for a container with none of its own."""
    from types import SimpleNamespace as NS

    from pvegpu.run.run_context import run_context
    from pvegpu.startup.deploy_context import container_settings

    text = (
        "nodes:\n  - address: 127.0.0.2\n    containers:\n"
        "      - {vmid: 200, ct_memory_mib: 4096, target_gpus: [0, 1, 2], drafter_gpus: [3]}\n"
        "      - {vmid: 201, target_gpus: [4, 5, 6], drafter_gpus: [7]}\n"
    )
    settings = settings_of(tmp_path, text, monkeypatch)

    class FakeState: ...

    node = NS(name="127.0.0.2", state=FakeState())
    run_context(node.state).settings = settings
    assert container_settings(node, 200).container == settings["@pct/127.0.0.2/200"].container
    assert container_settings(node, 200).container != settings["127.0.0.2"].container
    assert container_settings(node, 201) is settings["@pct/127.0.0.2/201"]
    assert container_settings(node, 202) is settings["127.0.0.2"]  # no such host in the run


def test_containers_sharing_several_gpus_is_one_line_for_the_pair(tmp_path, monkeypatch):
    text = "nodes:\n  - address: 127.0.0.2\n    containers: [200, 201]\n"  # both on the defaults
    with pytest.raises(SettingsError) as e:
        settings_of(tmp_path, text, monkeypatch)
    assert str(e.value).splitlines()[1:] == [
        "127.0.0.2: GPUs 0, 1, 2, 3, 4, 5, 6, 7 are training GPUs of both CT 200 and CT 201: "
        "give each container of a node its own GPUs (target_gpus and drafter_gpus in its fleet "
        "file `containers:` entry, e.g. {vmid: 201, target_gpus: [4, 5, 6], drafter_gpus: [7]})"
    ]
