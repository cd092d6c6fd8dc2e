"""The one notion of "a training is running in CT N" (pvegpu.plan.running_training) and the gates
that use it: the passthrough restart, lowered resources, memory under use, raw lines kept."""

from __future__ import annotations

import pytest

from pvegpu.operations.proxmox import lowered, memory_below_use, without
from pvegpu.plan.passthrough import plan_passthrough, restart_blocker
from pvegpu.plan.running_training import HAND, Trainer, others, running_training

UNIT = "dflash-train.service"
SCRIPT = ["/root/venv/bin/python", "/data/dflash/train.py", "--checkpoint-dir", "/data/ckpt"]
GPUS = [{"index": i, "uuid": f"GPU-{i}"} for i in range(2)]
MATCH = {"script": "/data/dflash/train.py", "paths": []}


def app(pid, cgroup, gpu=0, argv=SCRIPT):
    return {"pid": pid, "gpu_uuid": f"GPU-{gpu}", "argv": argv, "cgroup": cgroup, "used_mib": 1}


def proc(pid, cgroup, pgid=None, argv=SCRIPT):
    return {"pid": pid, "ppid": 1, "argv": argv, "cgroup": cgroup, "pgid": pgid or pid, "cwd": "/"}


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


def full_ct(procs, **live):
    return {
        "exists": True,
        "status": "running",
        "live": {"unit_active": "inactive", "units": [], **live},
        "processes": procs,
    }


def test_hybrid_cgroups_name_the_unit_from_the_hierarchy_that_holds_it():
    cgroup = (
        "9:name=systemd:/lxc/200/payload\n4:memory:/lxc/200\n"
        "0::/lxc/200/payload/system.slice/train.service"
    )
    ct = full_ct([proc(5, cgroup)])
    (t,) = running_training(200, ct, {"compute_apps": []}, UNIT, MATCH)
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
    ct = full_ct(
        [proc(5, "0::/lxc/200/ns/system.slice/old-train.service")],
        other_units={"old-train.service": "active"},
    )
    (t,) = running_training(200, ct, {"compute_apps": []}, UNIT, MATCH)
    assert t.ours and others([t]) == []


# --- the gates inside the operations (their bodies, fact readers replaced) ---------------------

HAND_RUN = Trainer(4242, " ".join(SCRIPT), HAND, pgid=4242, gpus=(0,))


def gate(monkeypatch, module, trainers):
    from types import SimpleNamespace

    waits = []
    monkeypatch.setattr(module, "host", SimpleNamespace(name="ct200"))
    monkeypatch.setattr(module, "running_here", lambda host, *a, **k: trainers)
    monkeypatch.setattr(
        module,
        "wait_for",
        lambda host, vmid, change, found, *consent: waits.append((change, found[0].pid)),
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
    monkeypatch.setattr(training, "failure", lambda *lines: iter(["fail: " + " ".join(lines)]))
    s = settings_with(restart_training=consent)
    commands = [str(c) for c in training.unit_running._inner(settings=s)]
    # asked right before the start: with consent, a training still there after the takeover
    # fails the host; without, the start and the enable wait
    assert not any("systemctl start" in c or "systemctl enable" in c for c in commands)
    if consent:
        assert any("still runs after the takeover" in c for c in commands), commands
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
            "tags": "pvegpu",
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
            "tags": "pvegpu",
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


def test_the_unit_never_starts_beside_another_containers_process_on_its_gpus(monkeypatch):
    from pvegpu.operations import training
    from pvegpu.plan.running_training import NEIGHBOUR

    waits = gate(monkeypatch, training, [])
    asked = []
    neighbour = Trainer(7, "python t.py", "CT 201 (train.service)", gpus=(2,), kind=NEIGHBOUR)
    monkeypatch.setattr(
        training, "neighbours_here", lambda host, gpus: asked.append(gpus) or [neighbour]
    )
    monkeypatch.setattr(
        training, "container_state", lambda: {"unit_active": "inactive", "unit_enabled": "enabled"}
    )
    for consent in (False, True):
        waits.clear()
        s = settings_with(restart_training=consent)
        assert [str(c) for c in training.unit_running._inner(settings=s)] == []
        assert waits == [(f"the start of {UNIT}", 7)]
    assert asked[0] == s.gpus.training
