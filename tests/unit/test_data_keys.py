"""Issue 26: a key in the data that no one reads (a typo of a setting) stops the run, one line per
key naming where it came from and the closest known key; pyinfra's own keys, the fleet's and the
user's declared own keys pass."""

from __future__ import annotations

import pytest
from pyinfra.api import Inventory

import pvegpu.plan.unit
from pvegpu.settings import SettingsError, defaults
from pvegpu.startup.all_settings import load_all
from pvegpu.startup.data_keys import HOW_TO_KEEP, key_line, unknown_key_lines
from pvegpu.startup.fleet import inventory_groups, load_fleet


def inventory(override=None, node_data=None, pve_hosts=None, all_data=None):
    """A pyinfra inventory as the CLI builds it: --data (override), host data, a group_data file
    of pve_hosts and group_data/all.py (the "all" data)."""
    return Inventory(
        (["n1"], {**defaults(), **(all_data or {})}),
        override_data=override or {},
        pve_hosts=([("n1", node_data or {})], pve_hosts or {}),
    )


def lines_of(inv) -> list[str]:
    return unknown_key_lines(list(inv))


def test_a_typo_on_the_command_line_is_named_with_its_source_and_the_setting_it_misses():
    assert lines_of(inventory(override={"torch_varient": "cu128"})) == [
        "torch_varient (--data): not a setting; did you mean torch_variant?",
        HOW_TO_KEEP,
    ]


def test_a_typo_in_a_group_data_file_names_the_file():
    lines = lines_of(inventory(pve_hosts={"restart_trainig": True}))
    assert lines[0] == (
        "restart_trainig (group_data/pve_hosts.py): not a setting; did you mean restart_training?"
    )


def test_a_typo_in_group_data_all_names_it():
    lines = lines_of(inventory(all_data={"keep_venv": 3}))
    assert lines[0] == "keep_venv (group_data/all.py): not a setting; did you mean keep_venvs?"


def test_a_typo_in_host_data_names_the_host_and_the_fleet():
    lines = lines_of(inventory(node_data={"ssh_prot": 2222}))
    assert (
        lines[0]
        == "n1: ssh_prot (the fleet file or inventory): not a setting; did you mean ssh_port?"
    )


def test_a_key_like_nothing_known_says_so():
    assert lines_of(inventory(override={"zzzz": 1}))[0] == (
        "zzzz (--data): not a setting; no setting is named like it"
    )


def test_pyinfra_own_keys_the_fleets_and_the_settings_pass():
    own = {
        "_sudo": True,
        "_sudo_user": "root",
        "_env": {},
        "ssh_port": 22,
        "ssh_user": "root",
        "ssh_known_hosts_file": "/k",
        "ssh_strict_host_key_checking": "yes",
        "ssh_connect_retries": 2,
        "ssh_paramiko_connect_kwargs": {},
        "ssh_hostname": "h",
        "pct_node": "n1",
        "pct_vmid": 200,
        "pve_ct_ids": [200],
    }
    assert lines_of(inventory(override={"torch_variant": "cu128"}, node_data=own)) == []


def test_the_escape_hatch_prefix_and_the_allow_list_pass():
    inv = inventory(
        override={"x_owner": "team-a", "my_key": 1}, all_data={"extra_data_keys": ["my_key"]}
    )
    assert lines_of(inv) == []
    inv = inventory(
        override={"my_key": 1, "extra_data_keys": "my_key"}
    )  # --data extra_data_keys=my_key
    assert lines_of(inv) == []


def test_only_a_leading_x_marks_a_key_as_the_users_own():
    assert lines_of(inventory(override={"max_batch_sise": 8}))[0] == (
        "max_batch_sise (--data): not a setting; did you mean max_batch_size?"
    )


def test_a_key_shared_by_every_host_is_one_line():
    inv = Inventory((["n1", "n2"], defaults()), override_data={"torch_varient": "cu128"})
    assert (
        lines_of(inv).count("torch_varient (--data): not a setting; did you mean torch_variant?")
        == 1
    )


def test_load_all_refuses_an_unknown_key_before_anything_else(monkeypatch):
    monkeypatch.setattr(pvegpu.plan.unit, "unit_problems", lambda s: [])
    with pytest.raises(SettingsError) as e:
        load_all(list(inventory(override={"torch_varient": "cu128"})))
    lines = str(e.value).splitlines()
    assert lines[:2] == [
        "bad settings, nothing was changed:",
        "torch_varient (--data): not a setting; did you mean torch_variant?",
    ]


def test_a_bad_allow_list_is_refused_by_the_settings(monkeypatch):
    monkeypatch.setattr(pvegpu.plan.unit, "unit_problems", lambda s: [])
    with pytest.raises(SettingsError, match="extra_data_keys has 'my key', not a data key name"):
        load_all(list(inventory(override={"extra_data_keys": ["my key"]})))


def test_the_fleet_file_gives_per_node_settings_to_the_node_and_its_containers(tmp_path):
    f = tmp_path / "fleet.yaml"
    f.write_text(
        "nodes:\n  - address: 127.0.0.2\n    containers: [200]\n"
        "    torch_variant: cu128\n    torch_varient: cu128\n"
    )
    pve, cts = inventory_groups(load_fleet({"PVE_FLEET": str(f)}, tmp_path))
    assert pve[0][1]["torch_variant"] == cts[0][1]["torch_variant"] == "cu128"
    inv = Inventory((["127.0.0.2", cts[0]], defaults()), pve_hosts=([pve[0]], {}))
    assert lines_of(inv) == [
        "127.0.0.2, @pct/127.0.0.2/200: torch_varient (the fleet file or inventory): not a "
        "setting; did you mean torch_variant?",
        HOW_TO_KEEP,
    ]


def test_key_line_without_a_source():
    assert key_line("keep_venv", None, ["keep_venvs"]) == (
        "keep_venv: not a setting; did you mean keep_venvs?"
    )


@pytest.mark.parametrize(
    ("where", "key", "value", "source"),
    [
        ("all_data", "rebuild", "container", "group_data/all.py"),
        ("pve_hosts", "restart_training", True, "group_data/pve_hosts.py"),
        ("node_data", "adopt", True, "the fleet file or inventory"),
        ("all_data", "destroy_volumes", "true", "group_data/all.py"),
    ],
)
def test_a_one_run_decision_outside_data_is_refused_naming_where_it_is(where, key, value, source):
    from pvegpu.startup.data_keys import one_run_lines

    inv = inventory(**{where: {key: value}})
    assert one_run_lines(list(inv)) == [
        f"{key}={value} ({source}): a one-run decision, taken from --data only; remove it "
        f"there and pass --data {key}={value} to the run that needs it"
    ]
    with pytest.raises(SettingsError, match=f"{key}={value} \\({source}\\)"):
        load_all(list(inv))


def test_one_run_decisions_from_data_or_off_elsewhere_pass():
    from pvegpu.startup.data_keys import one_run_lines

    inv = inventory(
        override={"rebuild": "venv", "restart_training": True, "adopt": True},
        pve_hosts={"restart_training": False, "rebuild": None},
    )
    assert one_run_lines(list(inv)) == []
