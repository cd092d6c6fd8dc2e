from pvegpu.plan.lxc_raw import raw_lines_match, raw_lxc_lines, rewrite_config
from pvegpu.plan.passthrough import (
    dev_set_args,
    modprobe_args,
    plan_passthrough,
    select_mode,
    wanted_devices,
)

NODE = {f"/dev/nvidia{i}": {"major": 195, "minor": i} for i in range(8)}
NODE.update(
    {
        "/dev/nvidiactl": {"major": 195, "minor": 255},
        "/dev/nvidia-modeset": {"major": 195, "minor": 254},
        "/dev/nvidia-uvm": {"major": 508, "minor": 0},
        "/dev/nvidia-uvm-tools": {"major": 508, "minor": 1},
        "/dev/nvidia-caps/nvidia-cap1": {"major": 511, "minor": 1},
    }
)
MAJORS = {"mem": 1, "drm": 226, "nvidia": 195, "nvidia-uvm": 508, "nvidia-caps": 511}


def test_wanted_devices_orders_gpus_numerically_and_skips_extras_unless_asked():
    nodes = dict(NODE, **{"/dev/nvidia10": {"major": 195, "minor": 10}})
    paths = wanted_devices(nodes, ())
    assert paths[:3] == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]
    assert paths[8] == "/dev/nvidia10"
    assert "/dev/nvidia-modeset" not in paths
    assert "/dev/nvidia-caps/nvidia-cap1" in wanted_devices(NODE, ("nvidia-caps",))


def test_dev_entries_are_idempotent_and_keep_foreign_devices():
    paths = wanted_devices(NODE, ())
    config = {"dev0": "/dev/dri/renderD128,gid=104"}
    args = dev_set_args(config, paths)
    assert args[:2] == ["--dev1", "/dev/nvidia0"]
    applied = dict(config)
    it = iter(args)
    for flag in it:
        applied[flag[2:]] = next(it)
    assert dev_set_args(applied, paths) == []


def test_raw_lines_use_majors_from_the_node_and_replace_stale_ones():
    paths = wanted_devices(NODE, ())
    lines = raw_lxc_lines(paths, NODE, MAJORS)
    assert ("lxc.cgroup2.devices.allow", "c 508:* rwm") in lines
    text = "arch: amd64\nlxc.cgroup2.devices.allow: c 226:* rwm\n"
    new = rewrite_config(text, lines, MAJORS, True)
    assert "lxc.cgroup2.devices.allow: c 226:* rwm" in new  # drm stays
    # uvm moves to major 509: the 508 line is stale and goes, nothing else is touched.
    majors2 = dict(MAJORS, **{"nvidia-uvm": 509})
    node2 = dict(
        NODE,
        **{
            "/dev/nvidia-uvm": {"major": 509, "minor": 0},
            "/dev/nvidia-uvm-tools": {"major": 509, "minor": 1},
        },
    )
    lines2 = raw_lxc_lines(paths, node2, majors2)
    parsed = [tuple(ln.split(": ", 1)) for ln in new.splitlines() if ln.startswith("lxc.")]
    assert raw_lines_match(parsed, lines, MAJORS)
    assert not raw_lines_match(parsed, lines2, majors2)
    newer = rewrite_config(new, lines2, majors2, True)
    assert "c 508:* rwm" not in newer and "c 509:* rwm" in newer
    assert newer.startswith("arch: amd64\n")


def test_rewrite_keeps_snapshot_sections_verbatim():
    text = (
        "arch: amd64\ndev0: /dev/nvidia0\n\n[snap1]\narch: amd64\nlxc.mount.entry: /dev/nvidia0 x\n"
    )
    new = rewrite_config(
        text,
        [("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file")],
        MAJORS,
        True,
    )
    assert "dev0: /dev/nvidia0\n\n[snap1]" not in new
    assert new.endswith("[snap1]\narch: amd64\nlxc.mount.entry: /dev/nvidia0 x\n")


# --- the plan the preflight and the operation share ----------------------------------------------

GPUS = [{"index": i, "minor": i} for i in range(8)]
WANTED = [f"/dev/nvidia{i}" for i in range(8)] + [
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
]


def state(pve="8.4.1", devices=None, majors=None):
    return {
        "pve_version": pve,
        "devices": dict(NODE if devices is None else devices),
        "majors": dict(MAJORS if majors is None else majors),
        "gpus": GPUS,
    }


def live_view(devices=NODE, unit="active"):
    return {
        "devices": {p: d for p, d in devices.items() if p in WANTED},
        "unit_active": unit,
        "driver_version": "580.95.05",
        "libs": {},
        "nvidia_smi": True,
    }


def dev_config():
    return {f"dev{i}": p for i, p in enumerate(WANTED)}


def ct(
    config=None,
    status="running",
    live=None,
    raw=(),
    text="arch: amd64\n",
    pending=None,
    pending_delete=(),
):
    return {
        "exists": True,
        "status": status,
        "config": dict(config or {}),
        "raw_lxc": list(raw),
        "text": text,
        "pending": dict(pending or {}),
        "pending_delete": list(pending_delete),
        "live": live,
    }


def test_mode_follows_the_pve_container_version_unless_forced():
    # devN came with pve-container 5.0.7 (PVE 8.1 shipped 5.0.8); pve-manager guarantees such a
    # pve-container only from 8.2.4 (its d/control: pve-container >= 5.1.11).
    assert select_mode("auto", {"pve_version": "8.0.4", "pve_container": "5.0.4"}) == "lxc"
    assert select_mode("auto", {"pve_version": "8.1.0", "pve_container": "5.0.6"}) == "lxc"
    assert select_mode("auto", {"pve_version": "8.1.0", "pve_container": "5.0.7"}) == "dev"
    assert select_mode("auto", {"pve_version": "9.0.3", "pve_container": "6.0.9"}) == "dev"
    assert select_mode("auto", {"pve_version": "8.2.3"}) == "lxc"
    assert select_mode("auto", {"pve_version": "8.2.4"}) == "dev"
    assert select_mode("auto", {}) == "lxc"
    assert select_mode("dev", {"pve_container": "5.0.4"}) == "dev"
    assert select_mode("lxc", {"pve_container": "6.0.18"}) == "lxc"


def test_pve_8_1_with_its_pve_container_gets_devn_entries():
    on_8_1 = dict(state("8.1.4"), pve_container="5.0.8")
    plan = plan_passthrough("auto", (), on_8_1, ct({}, status="stopped"))
    assert plan.mode == "dev" and plan.set_args[:2] == ["--dev0", "/dev/nvidia0"]
    old = dict(state("8.1.4"), pve_container="5.0.6")  # pve-manager 8.1 allows >= 5.0.5
    assert plan_passthrough("auto", (), old, ct({}, status="stopped")).mode == "lxc"


def test_converged_running_container_needs_nothing():
    plan = plan_passthrough("auto", (), state(), ct(dev_config(), live=live_view()))
    assert plan.mode == "dev" and plan.paths == WANTED
    assert not plan.changes_config and plan.restart_reasons == [] and plan.modprobe == []


def test_stopped_container_gets_entries_without_a_restart():
    plan = plan_passthrough("auto", (), state(), ct({}, status="stopped"))
    assert plan.set_args[:4] == ["--dev0", "/dev/nvidia0", "--dev1", "/dev/nvidia1"]
    assert plan.restart_reasons == []


def test_running_container_restarts_when_entries_change_or_wait_pending():
    config = dev_config()
    del config["dev10"]
    plan = plan_passthrough("auto", (), state(), ct(config, live=live_view()))
    assert plan.set_args == ["--dev10", "/dev/nvidia-uvm-tools"]
    assert plan.restart_reasons == ["its GPU passthrough config changes"]
    # A previous run's `pct set` went to [pve:pending]: nothing to set, but a start must apply it.
    plan = plan_passthrough(
        "auto",
        (),
        state(),
        ct(config, live=live_view(), pending={"dev10": "/dev/nvidia-uvm-tools"}),
    )
    assert plan.set_args == [] and plan.restart_reasons == ["pending dev10 apply only at start"]


def test_uvm_reloaded_with_a_new_major_makes_the_running_container_stale_in_dev_mode():
    node2 = dict(
        NODE,
        **{
            "/dev/nvidia-uvm": {"major": 509, "minor": 0},
            "/dev/nvidia-uvm-tools": {"major": 509, "minor": 1},
        },
    )
    plan = plan_passthrough(
        "auto",
        (),
        state(devices=node2, majors=dict(MAJORS, **{"nvidia-uvm": 509})),
        ct(dev_config(), live=live_view(NODE)),
    )
    assert not plan.changes_config  # devN entries are paths: Proxmox re-reads majors at start
    assert plan.restart_reasons == [
        "/dev/nvidia-uvm is 508:0 in the container, 509:0 on the node",
        "/dev/nvidia-uvm-tools is 508:1 in the container, 509:1 on the node",
    ]


def test_missing_uvm_nodes_are_created_before_set_and_start():
    nodes = {p: d for p, d in NODE.items() if not p.startswith("/dev/nvidia-uvm")}
    plan = plan_passthrough("auto", (), state(devices=nodes), ct({}, status="stopped"))
    assert plan.modprobe == [["-u", "-c", "0"]]
    assert "/dev/nvidia-uvm" in plan.paths
    assert modprobe_args(["/dev/nvidia3", "/dev/nvidiactl"], {}) == [["-c", "3", "-c", "255"]]


def test_raw_mode_rewrites_a_stale_major_and_keeps_the_rest():
    old = raw_lxc_lines(WANTED, NODE, MAJORS)
    text = "arch: amd64\nhostname: t\nlxc.apparmor.profile: unconfined\n" + "".join(
        f"{k}: {v}\n" for k, v in old
    )
    raw = [["lxc.apparmor.profile", "unconfined"]] + [list(x) for x in old]
    assert not plan_passthrough(
        "auto", (), state("8.0.4"), ct({}, raw=raw, text=text, live=live_view())
    ).changes_config
    node2 = dict(
        NODE,
        **{
            "/dev/nvidia-uvm": {"major": 509, "minor": 0},
            "/dev/nvidia-uvm-tools": {"major": 509, "minor": 1},
        },
    )
    majors2 = dict(MAJORS, **{"nvidia-uvm": 509})
    plan = plan_passthrough(
        "auto", (), state("8.0.4", node2, majors2), ct({}, raw=raw, text=text, live=live_view(NODE))
    )
    assert plan.mode == "lxc" and plan.set_args == []
    assert "c 509:* rwm" in plan.new_text and "508" not in plan.new_text
    assert plan.new_text.startswith("arch: amd64\nhostname: t\nlxc.apparmor.profile: unconfined\n")
    assert "its GPU passthrough config changes" in plan.restart_reasons


def test_switching_modes_removes_the_other_modes_entries():
    lines = raw_lxc_lines(WANTED, NODE, MAJORS)
    text = "arch: amd64\n" + "".join(f"{k}: {v}\n" for k, v in lines)
    plan = plan_passthrough(
        "dev", (), state(), ct({}, raw=[list(x) for x in lines], text=text, status="stopped")
    )
    assert plan.new_text == "arch: amd64\n" and plan.set_args[:2] == ["--dev0", "/dev/nvidia0"]
    text = "arch: amd64\ndev0: /dev/nvidia0\n\n[pve:pending]\ndev1: /dev/nvidia1\n"
    plan = plan_passthrough(
        "lxc",
        (),
        state(),
        ct({"dev0": "/dev/nvidia0"}, text=text, pending={"dev1": "/dev/nvidia1"}, status="stopped"),
    )
    assert "dev0:" not in plan.new_text and "dev1:" not in plan.new_text
    assert (
        "[pve:pending]" not in plan.new_text and "lxc.mount.entry: /dev/nvidia0 " in plan.new_text
    )


def test_extras_only_when_configured():
    plan = plan_passthrough(
        "auto", ("nvidia-modeset", "nvidia-caps"), state(), ct({}, status="stopped")
    )
    assert "/dev/nvidia-modeset" in plan.paths and "/dev/nvidia-caps/nvidia-cap1" in plan.paths


def test_an_added_entry_is_hotplugged_on_pve9_but_restarts_on_pve8():
    # pve-container >= 6.0.4 hot-plugs a devN *added* to a running CT ("implement device
    # hotplug"); an edited or deleted one, and every change on 5.x, waits for the next start.
    config = dev_config()
    del config["dev10"]
    live = live_view()
    del live["devices"]["/dev/nvidia-uvm-tools"]
    nine = dict(state(), pve_version="9.1.1", pve_container="6.0.18")
    plan = plan_passthrough("auto", (), nine, ct(config, live=live))
    assert plan.set_args == ["--dev10", "/dev/nvidia-uvm-tools"]
    assert plan.hotplug == ["/dev/nvidia-uvm-tools"] and plan.restart_reasons == []
    eight = dict(state(), pve_version="8.4.1", pve_container="5.2.6")
    assert plan_passthrough("auto", (), eight, ct(config, live=live)).restart_reasons == [
        "its GPU passthrough config changes",
        "/dev/nvidia-uvm-tools is missing in the container",
    ]
    # an entry that must go (a GPU the node no longer has) is a delete: it waits for a start
    edited = dict(dev_config(), dev10="/dev/nvidia9")
    plan = plan_passthrough("auto", (), nine, ct(edited, live=live_view()))
    assert plan.hotplug == [] and "its GPU passthrough config changes" in plan.restart_reasons
    # a user's own nvidia-modeset entry is kept; only the missing uvm-tools is added (hot-plugged)
    users = dict(dev_config(), dev10="/dev/nvidia-modeset")
    node = dict(
        nine, devices={**state()["devices"], "/dev/nvidia-modeset": {"major": 195, "minor": 254}}
    )
    plan = plan_passthrough("auto", (), node, ct(users, live=live_view()))
    assert "--delete" not in plan.set_args and plan.hotplug == ["/dev/nvidia-uvm-tools"]
