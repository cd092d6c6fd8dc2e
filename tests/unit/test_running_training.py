"""The one notion of "a training is running in CT N" (pvegpu.plan.running_training) and the gates
that use it: the passthrough restart, lowered resources, memory under use, raw lines kept."""

from __future__ import annotations

import pytest

from pvegpu.operations.proxmox import lowered, memory_below_use, without
from pvegpu.plan.passthrough import plan_passthrough, restart_blocker
from pvegpu.plan.running_training import (
    HAND,
    Trainer,
    other_units,
    others,
    running_training,
    summary_line,
)

UNIT = "dflash-train.service"
SCRIPT = ["/root/venv/bin/python", "/data/dflash/train.py", "--checkpoint-dir", "/data/ckpt"]
GPUS = [{"index": i, "uuid": f"GPU-{i}"} for i in range(2)]


def app(pid, cgroup, gpu=0, argv=SCRIPT):
    return {"pid": pid, "gpu_uuid": f"GPU-{gpu}", "argv": argv, "cgroup": cgroup, "used_mib": 1}


def proc(pid, cgroup, pgid=None, argv=SCRIPT):
    return {"pid": pid, "argv": argv, "cgroup": cgroup, "pgid": pgid or pid}


@pytest.mark.parametrize("active", ["active", "activating", "reloading", "deactivating"])
def test_our_unit_in_any_running_state_is_a_running_training(active):
    found = running_training(200, {"live": {"unit_active": active}}, {}, UNIT)
    assert [(t.pid, t.started_by, t.ours) for t in found] == [(None, UNIT, True)]
    assert others(found) == []


@pytest.mark.parametrize("active", ["inactive", "failed", None])
def test_our_unit_stopped_is_none(active):
    assert running_training(200, {"live": {"unit_active": active}}, {}, UNIT) == []


def test_a_run_started_by_hand_is_named_by_pid_command_and_how():
    ct = {
        "live": {"unit_active": "inactive"},
        "processes": [proc(4242, "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope", 4240)],
    }
    (t,) = running_training(200, ct, {"gpus": GPUS}, UNIT)
    assert (t.pid, t.pgid, t.started_by, t.ours) == (4242, 4240, HAND, False)
    assert t.command == " ".join(SCRIPT)
    assert t.named == "pid 4242, started by hand"


def test_a_users_own_unit_and_cron_name_their_unit():
    ct = {
        "processes": [
            proc(10, "0::/lxc/200/ns/system.slice/train.service"),
            proc(11, "0::/lxc/200/ns/system.slice/cron.service"),
        ]
    }
    found = running_training(200, ct, {}, UNIT)
    assert [t.started_by for t in found] == ["train.service", "cron.service"]
    assert found[0].named == "pid 10, under train.service"
    assert other_units(found) == ["cron.service", "train.service"]


def test_any_process_of_the_container_holding_a_gpu_counts_whatever_it_runs():
    node = {
        "gpus": GPUS,
        "compute_apps": [
            app(77, "0::/lxc/200/ns/init.scope", gpu=1, argv=["python3", "notebook.py"])
        ],
    }
    (t,) = running_training(200, {}, node, UNIT)
    assert (t.pid, t.gpus, t.command, t.started_by) == (77, (1,), "python3 notebook.py", HAND)


def test_training_gpus_limit_which_gpu_holders_count():
    node = {"gpus": GPUS, "compute_apps": [app(77, "0::/lxc/200/ns/init.scope", gpu=1)]}
    assert running_training(200, {}, node, UNIT, training_gpus=[0]) == []


def test_another_containers_or_the_nodes_process_does_not_count():
    node = {
        "gpus": GPUS,
        "compute_apps": [
            app(7, "0::/lxc/201/ns/system.slice/x.service"),
            app(8, "0::/system.slice/foo.service"),
            app(9, "0::/lxc.monitor/200"),
        ],
    }
    ct = {"processes": [proc(12, "0::/lxc/2000/ns/init.scope"), proc(13, "0::/lxc/20/ns/a")]}
    assert running_training(200, ct, node, UNIT) == []


def test_a_process_that_exited_between_reads_does_not_count():
    # nvidia-smi listed it, its /proc/<pid>/cgroup was gone when the probe read it
    node = {"gpus": GPUS, "compute_apps": [app(5, "")]}
    assert running_training(200, {}, node, UNIT) == []


def test_one_process_seen_twice_is_one_training_with_all_its_gpus():
    cgroup = f"0::/lxc/200/ns/system.slice/{UNIT}"
    node = {"gpus": GPUS, "compute_apps": [app(5, cgroup, 0), app(5, cgroup, 1)]}
    ct = {"live": {"unit_active": "active"}, "processes": [proc(5, cgroup, 5)]}
    (t,) = running_training(200, ct, node, UNIT)
    assert (t.pid, t.gpus, t.pgid, t.ours) == (5, (0, 1), 5, True)


def test_summary_line_is_the_issues_form():
    line = summary_line("pve1", 4, Trainer(4242, "x", HAND))
    assert line == (
        "pvegpu: pve1: converged; 4 changes wait for the running training (pid "
        "4242, started by hand): rerun with --data restart_training=true to apply them"
    )


# --- the gates ----------------------------------------------------------------------------------


def test_restart_blocker_names_a_training_it_did_not_start():
    hand = [Trainer(4242, "python t.py", HAND)]
    line = restart_blocker(200, UNIT, {"unit_active": "inactive"}, ["x"], trainers=hand)
    assert "pid 4242, started by hand" in line
    assert restart_blocker(200, UNIT, {"unit_active": "inactive"}, ["x"], trainers=[]) is None
    # today's positional form still decides by the unit's state
    assert restart_blocker(200, UNIT, {"unit_active": "active"}, ["x"]) is not None


def test_lowering_cores_memory_or_swap_is_found_and_raising_is_not():
    config = {"cores": "16", "memory": "131072", "swap": "512"}
    args = ["--cores", "32", "--memory", "262144", "--swap", "0", "--onboot", "1"]
    assert lowered(config, args) == ["swap"]
    assert lowered({"cores": "64", "memory": "300000"}, args) == ["cores", "memory", "swap"]
    assert without(args, ["swap"]) == ["--cores", "32", "--memory", "262144", "--onboot", "1"]


def test_memory_below_use_names_both_figures_and_the_fix():
    line = memory_below_use(200, 65536, 100 * 1024**3)
    assert "102400 MiB" in line and "ct_memory_mib=65536" in line
    assert "ct_memory_mib >= 102400" in line
    assert memory_below_use(200, 262144, 100 * 1024**3) is None
    assert memory_below_use(200, 1024, None) is None


def test_memory_below_use_on_cgroup_v1_fails_with_ebusy_and_kills_nothing():
    """cgroup v1 (memcontrol-v1 mem_cgroup_resize_max) reclaims, then refuses a limit below use
    with EBUSY; only v2's memory.max OOM-kills to fit."""
    v1 = memory_below_use(200, 65536, 100 * 1024**3, "v1")
    assert "ct_memory_mib=65536 would make `pct set` fail" in v1 and "EBUSY" in v1
    assert "OOM" not in v1 and "ct_memory_mib >= 102400" in v1
    assert "OOM-kill" in memory_below_use(200, 65536, 100 * 1024**3, "v2")


NODE = {f"/dev/nvidia{i}": {"major": 195, "minor": i} for i in range(2)}
NODE.update(
    {
        "/dev/nvidiactl": {"major": 195, "minor": 255},
        "/dev/nvidia-modeset": {"major": 195, "minor": 254},
        "/dev/nvidia-uvm": {"major": 509, "minor": 0},
        "/dev/nvidia-uvm-tools": {"major": 509, "minor": 1},
    }
)
STATE = {
    "devices": NODE,
    "majors": {"nvidia": 195, "nvidia-uvm": 509},
    "pve_container": "5.2.6",
    "gpus": [{"minor": 0}, {"minor": 1}],
}
# as the community guides write them: majors from /proc/devices, plus nvidia-modeset
GUIDE = [
    ["lxc.cgroup2.devices.allow", "c 195:* rwm"],
    ["lxc.cgroup2.devices.allow", "c 509:* rwm"],
] + [
    ["lxc.mount.entry", f"{p} {p[1:]} none bind,optional,create=file"]
    for p in [
        "/dev/nvidia0",
        "/dev/nvidia1",
        "/dev/nvidiactl",
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
]


def live(paths):
    return {"unit_active": "inactive", "devices": {p: NODE[p] for p in paths}}


def test_raw_guide_lines_satisfy_a_running_container_and_its_extra_devices_stay():
    text = "\n".join(f"{k}: {v}" for k, v in GUIDE) + "\n"
    ct = {
        "status": "running",
        "config": {},
        "raw_lxc": GUIDE,
        "text": text,
        "live": live([p for p in NODE]),
    }
    plan = plan_passthrough("auto", (), STATE, ct)
    assert plan.mode == "dev"
    assert (plan.set_args, plan.new_text, plan.restart_reasons) == ([], None, [])
    assert "/dev/nvidia-modeset" in plan.paths


def test_raw_lines_missing_a_device_are_still_converted():
    raw = [line for line in GUIDE if "nvidia-uvm-tools" not in line[1]]
    text = "\n".join(f"{k}: {v}" for k, v in raw) + "\n"
    ct = {
        "status": "running",
        "config": {},
        "raw_lxc": raw,
        "text": text,
        "live": live([p for p in NODE if p != "/dev/nvidia-uvm-tools"]),
    }
    plan = plan_passthrough("auto", (), STATE, ct)
    assert plan.set_args and plan.restart_reasons
    # the user's nvidia-modeset moves to a devN entry with the rest, never dropped
    assert "/dev/nvidia-modeset" in plan.set_args


def test_hybrid_cgroups_name_the_unit_from_the_hierarchy_that_holds_it():
    cgroup = (
        "9:name=systemd:/lxc/200/payload\n4:memory:/lxc/200\n"
        "0::/lxc/200/payload/system.slice/train.service"
    )
    (t,) = running_training(200, {"processes": [proc(5, cgroup)]}, {}, UNIT)
    assert t.started_by == "train.service"


def test_the_preflight_refuses_a_memory_limit_under_the_containers_use_before_any_change():
    from pvegpu.settings import Settings, defaults
    from pvegpu.startup.preflight import container_problems

    s = Settings.from_data({**defaults(), "ct_memory_mib": 65536})
    ct = {
        "exists": True,
        "status": "running",
        "config": {"memory": "131072"},
        "memory_current": 100 * 1024**3,
    }
    problems, _ = container_problems(s, {"containers": {"200": ct}}, "n1", 200)
    assert any("CT 200 uses 102400 MiB of memory now: ct_memory_mib=65536" in p for p in problems)
    ct["memory_current"] = 10 * 1024**3
    problems, _ = container_problems(s, {"containers": {"200": ct}}, "n1", 200)
    assert not any("memory now" in p for p in problems)


def test_a_unit_pvegpu_left_under_an_earlier_name_is_its_own_not_taken_over():
    ct = {
        "live": {"unit_active": "inactive", "other_units": {"old-train.service": "active"}},
        "processes": [proc(5, "0::/lxc/200/ns/system.slice/old-train.service")],
    }
    (t,) = running_training(200, ct, {}, UNIT)
    assert t.ours and others([t]) == []


# --- the gates inside the operations (their bodies, fact readers replaced) ---------------------

HAND_RUN = Trainer(4242, " ".join(SCRIPT), HAND, pgid=4242, gpus=(0,))


def gate(monkeypatch, module, trainers):
    from types import SimpleNamespace

    waits = []
    monkeypatch.setattr(module, "host", SimpleNamespace(name="ct200"))
    monkeypatch.setattr(module, "running_here", lambda host, *a, **k: trainers)
    monkeypatch.setattr(
        module, "wait_for", lambda host, vmid, change, found: waits.append((change, found[0].pid))
    )
    return waits


def settings_with(**overrides):
    from pvegpu.settings import Settings, defaults

    return Settings.from_data({**defaults(), **overrides})


@pytest.mark.parametrize("consent", [False, True])
def test_unit_running_never_starts_beside_a_training_nor_clears_it_without_consent(
    monkeypatch, consent
):
    from pvegpu.operations import training

    waits = gate(monkeypatch, training, [HAND_RUN])
    monkeypatch.setattr(
        training, "container_state", lambda: {"unit_active": "inactive", "unit_enabled": "disabled"}
    )
    s = settings_with(restart_training=consent)
    commands = [str(c) for c in training.unit_running._inner(settings=s)]
    if consent:
        assert any("systemctl start dflash-train.service" in c for c in commands)
    else:
        assert commands == []
        assert waits == [(f"systemctl enable {UNIT}", 4242), (f"the start of {UNIT}", 4242)]


def test_container_resources_wait_under_a_training_pvegpu_did_not_start(monkeypatch):
    from pvegpu.operations import proxmox

    waits = gate(monkeypatch, proxmox, [HAND_RUN])
    ct = {
        "exists": True,
        "status": "running",
        "config": {
            "cores": "16",
            "memory": "131072",
            "swap": "512",
            "mp0": "/tank/dflash,mp=/data",
        },
    }
    monkeypatch.setattr(
        proxmox, "read_state", lambda *a, **k: {"data_dir_exists": True, "containers": {"200": ct}}
    )
    s = settings_with()
    commands = [
        str(c)
        for c in proxmox.container_present._inner(
            vmid=200, container=s.container, policy=s.policy, training=s.training
        )
    ]
    assert [w[0] for w in waits] == [
        "pct set 200 --cores 32 (changes cores)",
        "pct set 200 --memory 262144 (changes memory)",
        "pct set 200 --swap 0 (lowers swap)",
    ]
    assert commands == ["pct set 200 --onboot 1 --protection 1"]


def test_under_our_own_unit_only_a_lowering_waits(monkeypatch):
    from pvegpu.operations import proxmox

    ours = Trainer(None, UNIT, UNIT, ours=True)
    waits = gate(monkeypatch, proxmox, [ours])
    ct = {
        "exists": True,
        "status": "running",
        "config": {
            "cores": "16",
            "memory": "131072",
            "swap": "512",
            "onboot": "1",
            "protection": "1",
            "mp0": "/tank/dflash,mp=/data",
        },
    }
    monkeypatch.setattr(
        proxmox, "read_state", lambda *a, **k: {"data_dir_exists": True, "containers": {"200": ct}}
    )
    s = settings_with()
    commands = [
        str(c)
        for c in proxmox.container_present._inner(
            vmid=200, container=s.container, policy=s.policy, training=s.training
        )
    ]
    assert [w[0] for w in waits] == ["pct set 200 --swap 0 (lowers swap)"]
    assert commands == ["pct set 200 --cores 32 --memory 262144"]


def test_the_venv_switch_waits_and_the_build_beside_is_kept(monkeypatch):
    from pvegpu.operations import training

    waits = gate(monkeypatch, training, [HAND_RUN])
    monkeypatch.setattr(training, "mark_container_only", lambda host: None)
    monkeypatch.setattr(training, "remember", lambda update: None)
    s = settings_with()
    build = s.torch.build_name
    monkeypatch.setattr(
        training,
        "container_state",
        lambda: {
            "venvs": {build: {"link": f"{build}.b1", "real": f"{build}.b1"}},
            "venv_link": None,
            "venv_path_is_dir": True,
            "unit_digest": "x",
        },
    )
    commands = " ".join(str(c) for c in training.live_build_and_unit._inner(settings=s))
    assert "mv -T /root/venv " not in commands and "/root/venv.pvegpu-tmp" not in commands
    assert waits == [(f"the switch of /root/venv to {build}", 4242)]
