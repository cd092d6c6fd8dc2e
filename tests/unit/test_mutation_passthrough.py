"""GPU passthrough planning: behaviours the mutation run (bench/mutation.py) found unpinned.

Config text follows pve-container's write_pct_config: main keys, raw ``lxc.*`` lines, then
``[pve:pending]`` and the snapshots, each after a blank line.
"""

from pvegpu.plan.lxc_raw import is_our_raw_line, raw_lxc_lines, rewrite_config
from pvegpu.plan.passthrough import (
    dev_set_args,
    effective_config,
    expected_numbers,
    modprobe_args,
    pending_ours,
    plan_passthrough,
    select_mode,
    stale_live_devices,
)
from tests.unit.test_passthrough import MAJORS, NODE, WANTED, ct, dev_config, live_view, state

UVM_MISSING = {p: d for p, d in NODE.items() if not p.startswith("/dev/nvidia-uvm")}
TUN = ("lxc.cgroup2.devices.allow", "c 10:200 rwm")  # /dev/net/tun: no NVIDIA major, not ours
DRM = ("lxc.cgroup2.devices.allow", "c 226:* rwm")  # an iGPU's render nodes: owned by drm


# --- device numbers ------------------------------------------------------------------------------


def test_expected_numbers_of_nodes_nvidia_modprobe_has_not_created_yet():
    assert expected_numbers("/dev/nvidia3", {}, MAJORS) == (195, 3)
    assert expected_numbers("/dev/nvidiactl", {}, MAJORS) == (195, 255)
    assert expected_numbers("/dev/nvidia-modeset", {}, MAJORS) == (195, 254)
    assert expected_numbers("/dev/nvidia-uvm", {}, MAJORS) == (508, 0)
    assert expected_numbers("/dev/nvidia-uvm-tools", {}, MAJORS) == (508, 1)
    # the node's own device wins over /proc/devices
    assert expected_numbers("/dev/nvidia3", {"/dev/nvidia3": {"major": 7, "minor": 9}}, MAJORS) == (
        7,
        9,
    )


def test_expected_numbers_unknown_without_the_drivers_major():
    for path in ("/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps/x"):
        assert expected_numbers(path, {}, {"mem": 1}) is None


def test_one_allow_line_per_major_even_for_nodes_still_missing():
    paths = [f"/dev/nvidia{i}" for i in range(8)] + [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-caps/nvidia-cap2",
    ]
    allows = [v for k, v in raw_lxc_lines(paths, {}, MAJORS) if k == "lxc.cgroup2.devices.allow"]
    assert allows == ["c 195:* rwm", "c 508:* rwm", "c 511:* rwm"]
    # a major nobody reports yet (the driver is not loaded) gives no allow line at all
    assert [k for k, _ in raw_lxc_lines(["/dev/nvidia-uvm"], {}, {})] == ["lxc.mount.entry"]


def test_allow_line_follows_the_major_of_the_node_that_is_bound():
    # /proc/devices already lists the reloaded uvm module (509), the node is still the old one
    lines = raw_lxc_lines(["/dev/nvidia-uvm"], NODE, dict(MAJORS, **{"nvidia-uvm": 509}))
    assert lines[0] == ("lxc.cgroup2.devices.allow", "c 508:* rwm")


def test_modprobe_creates_every_missing_gpu_node_and_modeset():
    assert modprobe_args(["/dev/nvidia1", "/dev/nvidia2", "/dev/nvidiactl"], {}) == [
        ["-c", "1", "-c", "2", "-c", "255"]
    ]
    assert modprobe_args(["/dev/nvidia0", "/dev/nvidia-modeset"], NODE) == []
    assert modprobe_args(["/dev/nvidia0", "/dev/nvidia-modeset"], {"/dev/nvidia0": {}}) == [["-m"]]


# --- devN entries ---------------------------------------------------------------------------------


def test_dev_entries_with_options_or_other_numbers_are_left_alone():
    # devN values carry options after the path (`/dev/x[,gid=,mode=,uid=,deny-write=]`)
    config = {"dev0": "/dev/nvidia0,mode=0666", "dev5": "/dev/nvidiactl,gid=44"}
    assert dev_set_args(config, ["/dev/nvidia0", "/dev/nvidiactl"]) == []


def test_dev_entries_swap_a_path_and_delete_every_stale_one():
    # wanted entries keep their index and a new path takes the first free one, so on PVE 9 the
    # addition is hot-plugged (an edited devN would wait for a restart)
    config = {
        "dev0": "/dev/nvidia0",
        "dev1": "/dev/nvidia1",
        "dev2": "/dev/nvidia2",
        "dev3": "/dev/nvidia3",
        "dev4": "/dev/dri/renderD128",
    }
    assert dev_set_args(config, ["/dev/nvidia0", "/dev/nvidiactl"]) == [
        "--dev5",
        "/dev/nvidiactl",
        "--delete",
        "dev1,dev2,dev3",
    ]
    # same number of entries, one other path: not converged
    config = {"dev0": "/dev/nvidia0", "dev1": "/dev/nvidia1"}
    assert dev_set_args(config, ["/dev/nvidia0", "/dev/nvidia2"]) == [
        "--dev2",
        "/dev/nvidia2",
        "--delete",
        "dev1",
    ]


def test_effective_config_applies_pending_values_and_deletions():
    entry = {
        "config": {"dev0": "/dev/nvidia0", "dev1": "/dev/nvidia1", "memory": "4096"},
        "pending": {"dev2": "/dev/nvidia2"},
        "pending_delete": ["dev1", "swap"],
    }
    assert effective_config(entry) == {
        "dev0": "/dev/nvidia0",
        "dev2": "/dev/nvidia2",
        "memory": "4096",
    }


def test_pending_ours_lists_nvidia_changes_only():
    entry = {
        "config": {"dev1": "/dev/nvidia1", "dev4": "/dev/dri/card0"},
        "pending": {"dev2": "/dev/nvidia2", "dev3": "/dev/dri/renderD128", "mp0": "/dev/nvidia-x"},
        "pending_delete": ["dev1", "dev4", "dev9", "memory"],
    }
    assert pending_ours(entry) == ["dev1", "dev2"]


def test_a_container_entry_without_config_data_plans_every_entry():
    # only `exists` and `status` known (e.g. a probe that read no config): nothing is assumed set
    entry = {"exists": True, "status": "stopped"}
    assert effective_config(entry) == {} and pending_ours(entry) == []
    assert pending_ours({"pending_delete": ["dev1"]}) == []
    plan = plan_passthrough("dev", (), state(), entry)
    assert plan.set_args[:2] == ["--dev0", "/dev/nvidia0"] and plan.new_text is None
    plan = plan_passthrough("lxc", (), state(), entry)
    assert plan.new_text.startswith("lxc.cgroup2.devices.allow: c 195:* rwm\n")


def test_a_node_without_driver_data_wants_the_control_and_uvm_nodes_created():
    plan = plan_passthrough("auto", (), {"pve_version": "8.4.1"}, ct({}, status="stopped"))
    assert plan.paths == WANTED[8:]
    assert plan.modprobe == [["-c", "255"], ["-u", "-c", "0"]]
    # lxc mode: no major known, so binds only (no allow line can be written yet)
    plan = plan_passthrough("lxc", (), {}, ct({}, status="stopped"))
    assert plan.new_text == "arch: amd64\n" + "".join(
        f"lxc.mount.entry: {p} {p[1:]} none bind,optional,create=file\n" for p in WANTED[8:]
    )


def test_gpus_reported_without_a_device_node_are_passed_and_created():
    devices = {p: d for p, d in NODE.items() if p != "/dev/nvidia7"}
    plan = plan_passthrough("auto", (), state(devices=devices), ct({}, status="stopped"))
    assert plan.paths == WANTED and plan.modprobe == [["-c", "7"]]


# --- raw lxc lines and the config text ------------------------------------------------------------


def test_allow_lines_of_other_devices_are_not_ours():
    assert not is_our_raw_line(*TUN, MAJORS)
    assert not is_our_raw_line(*DRM, MAJORS)
    assert not is_our_raw_line("lxc.apparmor.profile", "unconfined", MAJORS)
    assert is_our_raw_line("lxc.cgroup2.devices.allow", "c 507:* rwm", MAJORS)  # stale uvm major


def test_lxc_mode_keeps_other_allow_lines_and_keys_after_ours():
    ours = raw_lxc_lines(WANTED, NODE, MAJORS)
    lines = [
        ("lxc.cgroup2.devices.allow", "c 195:* rwm"),
        DRM,
        TUN,
        ("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"),
    ]
    text = "arch: amd64\n" + "".join(f"{k}: {v}\n" for k, v in lines) + "hostname: t\n"
    plan = plan_passthrough(
        "lxc", (), state(), ct({"hostname": "t"}, raw=lines, text=text, status="stopped")
    )
    assert plan.new_text == (
        "arch: amd64\n" + f"{DRM[0]}: {DRM[1]}\n{TUN[0]}: {TUN[1]}\n"
        "hostname: t\n" + "".join(f"{k}: {v}\n" for k, v in ours)
    )


def test_lxc_mode_removes_a_leftover_nvidia_dev_entry_but_keeps_foreign_ones():
    lines = raw_lxc_lines(WANTED, NODE, MAJORS)
    raw_text = "".join(f"{k}: {v}\n" for k, v in lines)
    foreign = {"dev0": "/dev/dri/renderD128"}
    converged = ct(
        foreign,
        raw=lines,
        text=f"arch: amd64\ndev0: {foreign['dev0']}\n" + raw_text,
        status="stopped",
    )
    assert plan_passthrough("lxc", (), state(), converged).new_text is None
    text = "arch: amd64\ndev1: /dev/nvidia0\nhostname: t\n" + raw_text
    plan = plan_passthrough(
        "lxc",
        (),
        state(),
        ct({"dev1": "/dev/nvidia0", "hostname": "t"}, raw=lines, text=text, status="stopped"),
    )
    assert plan.new_text == "arch: amd64\nhostname: t\n" + raw_text


def test_lxc_mode_binds_uvm_nodes_missing_on_the_node_with_the_proc_devices_major():
    plan = plan_passthrough("lxc", (), state(devices=UVM_MISSING), ct({}, status="stopped"))
    assert "lxc.cgroup2.devices.allow: c 508:* rwm\n" in plan.new_text
    assert plan.modprobe == [["-u", "-c", "0"]]


def test_dev_mode_drops_raw_lines_but_keeps_the_dev_entries_already_there():
    lines = raw_lxc_lines(WANTED, NODE, MAJORS)
    text = "arch: amd64\ndev0: /dev/nvidia0\n" + "".join(f"{k}: {v}\n" for k, v in lines)
    plan = plan_passthrough(
        "dev", (), state(), ct({"dev0": "/dev/nvidia0"}, raw=lines, text=text, status="stopped")
    )
    assert plan.new_text == "arch: amd64\ndev0: /dev/nvidia0\n"
    assert plan.set_args[:2] == ["--dev1", "/dev/nvidia1"]


PENDING_THEN_SNAPSHOT = (
    "arch: amd64\ndev0: /dev/nvidia0\n"
    "\n[pve:pending]\nmemory: 4096\ndev1: /dev/nvidia1\ndev2: /dev/dri/renderD128\n"
    "\n[snap1]\narch: amd64\ndev0: /dev/nvidia0\n"
)


def test_switching_to_lxc_keeps_the_rest_of_pending_and_every_snapshot_verbatim():
    new = rewrite_config(PENDING_THEN_SNAPSHOT, [("lxc.mount.entry", "x")], MAJORS, True)
    assert new == (
        "arch: amd64\nlxc.mount.entry: x\n"
        "\n[pve:pending]\nmemory: 4096\ndev2: /dev/dri/renderD128\n"
        "\n[snap1]\narch: amd64\ndev0: /dev/nvidia0\n"
    )


def test_switching_to_lxc_drops_an_emptied_pending_section_before_the_snapshots():
    text = "arch: amd64\n\n[pve:pending]\ndev1: /dev/nvidia1\n\n[snap1]\narch: amd64\n"
    new = rewrite_config(text, [], MAJORS, True)
    assert new == "arch: amd64\n\n[snap1]\narch: amd64\n"
    # the same at the end of the file leaves no blank line behind
    text = "arch: amd64\n\n[snap1]\narch: amd64\n\n[pve:pending]\ndev1: /dev/nvidia1\n"
    assert rewrite_config(text, [], MAJORS, True) == "arch: amd64\n\n[snap1]\narch: amd64\n"


def test_switching_to_lxc_keeps_a_pending_section_with_one_other_key_left():
    text = "arch: amd64\n\n[pve:pending]\nmemory: 4096\ndev1: /dev/nvidia1\n"
    assert rewrite_config(text, [], MAJORS, True) == "arch: amd64\n\n[pve:pending]\nmemory: 4096\n"
    text += "\n[snap1]\narch: amd64\n"
    assert rewrite_config(text, [], MAJORS, True) == (
        "arch: amd64\n\n[pve:pending]\nmemory: 4096\n\n[snap1]\narch: amd64\n"
    )


def test_sections_are_kept_byte_for_byte_even_empty_or_with_blank_lines():
    text = "arch: amd64\n\n[snap0]\n\n[snap1]\n\narch: amd64\n"
    assert rewrite_config(text, [], MAJORS, True) == text


# --- PVE version and a running container's devices ----------------------------------------------


def test_mode_from_versions_of_two_or_three_parts():
    assert select_mode("auto", {"pve_version": "8.2"}) == "lxc"  # 8.2.0 < 8.2.4
    assert select_mode("auto", {"pve_version": "8.3"}) == "dev"
    assert select_mode("auto", {"pve_version": "9"}) == "dev"
    assert select_mode("auto", {"pve_container": "5.1"}) == "dev"
    assert select_mode("auto", {"pve_container": "5.0"}) == "lxc"
    assert select_mode("auto", {"pve_container": "5.0.10"}) == "dev"  # numbers, not text
    assert select_mode("auto", {"pve_container": "", "pve_version": "8.4.1"}) == "dev"
    assert select_mode("auto", {"pve_container": None, "pve_version": "8.2.3"}) == "lxc"


def test_running_container_devices_missing_or_extra_are_named():
    live = {
        "devices": {
            "/dev/nvidia0": {"major": 195, "minor": 0},
            "/dev/nvidia8": {"major": 195, "minor": 8},
        }
    }
    assert stale_live_devices(["/dev/nvidia0", "/dev/nvidiactl"], NODE, MAJORS, live) == [
        "/dev/nvidiactl is missing in the container",
        "/dev/nvidia8 is in the container but no longer passed through",
    ]
    assert stale_live_devices(["/dev/nvidia0"], NODE, MAJORS, {"unit_active": "active"}) == [
        "/dev/nvidia0 is missing in the container"
    ]


def test_running_container_stale_against_a_uvm_node_not_recreated_yet():
    majors = dict(MAJORS, **{"nvidia-uvm": 509})
    plan = plan_passthrough(
        "auto",
        (),
        state(devices=UVM_MISSING, majors=majors),
        ct(dev_config(), live=live_view(NODE)),
    )
    assert plan.stale == [
        "/dev/nvidia-uvm is 508:0 in the container, 509:0 on the node",
        "/dev/nvidia-uvm-tools is 508:1 in the container, 509:1 on the node",
    ]
