"""What the preview shows of a change (pvegpu.output.diff): a file as a unified diff, `pct set`
as each key old -> new, a build as the packages it installs."""

from __future__ import annotations

from pvegpu.output.diff import file_diff, package_changes, pct_set_changes
from pvegpu.plan.unit import render_unit
from pvegpu.settings import Settings, defaults


def test_a_new_file_is_all_additions_from_dev_null():
    lines = file_diff("/etc/modules-load.d/nvidia.conf", None, "nvidia\nnvidia_uvm\n")
    assert lines[:2] == ["--- /dev/null", "+++ /etc/modules-load.d/nvidia.conf (new)"]
    assert lines[3:] == ["+nvidia", "+nvidia_uvm"]


def test_an_unchanged_file_has_no_diff():
    assert file_diff("/x", "a\n", "a\n") == []


def test_a_changed_unit_shows_only_its_changed_line_in_context():
    s = Settings.from_data(defaults())
    old = render_unit(s)
    new = render_unit(s.changed(training_restart_delay_s=31))
    lines = file_diff("/etc/systemd/system/dflash-train.service", old, new)
    assert [ln for ln in lines if ln[:1] in "+-" and ln[:3] not in ("+++", "---")] == [
        "-RestartSec=30s",
        "+RestartSec=31s",
    ]


def test_pct_set_names_each_key_old_and_new_with_pcts_defaults():
    config = {"cores": "16", "memory": "131072", "dev2": "/dev/nvidia2"}
    args = ["--cores", "32", "--swap", "0", "--mp0", "/tank/dflash,mp=/data", "--delete", "dev2"]
    assert pct_set_changes(config, args, {"swap": "512"}) == [
        "cores: 16 -> 32",
        "swap: 512 -> 0",
        "mp0: (none) -> /tank/dflash,mp=/data",
        "dev2: /dev/nvidia2 -> (deleted)",
    ]


def test_a_build_lists_what_it_installs_upgrades_and_drops():
    live = {"torch": "2.11.0+cu130", "filelock": "3.20.0", "junk": "0.1"}
    new = {"torch": "2.11.0+cu128", "filelock": "3.20.0", "typing-extensions": "4.15.0"}
    assert package_changes(live, new) == [
        "typing-extensions 4.15.0 (new)",
        "torch 2.11.0+cu130 -> 2.11.0+cu128",
        "junk 0.1 (not in the new build)",
    ]
    assert package_changes(new, new) == []
