"""The gates every disruptive step passes (operations/training_gate.py) and their callers: the venv
switch, the unit's enable and start, rebuild=venv and rebuild=container, each with the trainings
and the container's state given; no booted node (issue 35)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pvegpu.operations import rebuild, training, training_gate
from pvegpu.plan.running_training import GPU_PROCESS, HAND, TRAINING, UNKNOWN, Trainer
from pvegpu.run import adoption, node_read
from tests.unit.test_running_training import HAND_RUN, SCRIPT, UNIT, gate, settings_with

OURS = Trainer(None, UNIT, UNIT, ours=True, unit=UNIT)


def fail_lines(monkeypatch, module):
    monkeypatch.setattr(module, "failure", lambda *lines: iter(["fail: " + " ".join(lines)]))


# --- training_gate -------------------------------------------------------------------------------


def test_a_fresh_read_never_answers_from_the_runs_last_read(monkeypatch):
    cached = {"read": "before the takeover"}
    new = {"read": "now"}
    entry = SimpleNamespace(request=SimpleNamespace(ct_detail="full", vmids=(200,)), doc=cached)
    monkeypatch.setattr(node_read, "last_read", lambda state, node: entry)
    monkeypatch.setattr(node_read, "node_state", lambda *a, **k: new)
    monkeypatch.setattr(training_gate, "run_context", lambda state: SimpleNamespace(node_args={}))
    inventory = SimpleNamespace(get_host=lambda name, default: SimpleNamespace(name=name))
    host = SimpleNamespace(state=object(), inventory=inventory)
    assert training_gate.current_read(host, "pve1", 200) is cached
    assert training_gate.current_read(host, "pve1", 200, fresh=True) is new
    assert training_gate.current_read(host, "pve1", 201) is new  # not in the last read


@pytest.mark.parametrize(
    "trainer",
    [
        Trainer(7, "jupyter", HAND, kind=GPU_PROCESS),
        Trainer(None, "?", "?", kind=UNKNOWN, reason="CT 200's view could not be read"),
    ],
    ids=["gpu-process", "unknown"],
)
def test_consent_defers_only_trainings_the_rest_is_recorded_as_waiting(monkeypatch, trainer):
    recorded = []
    monkeypatch.setattr(
        adoption, "record_wait", lambda state, node, ct, change, t: recorded.append(t) or "line"
    )
    ran: set[str] = set()
    monkeypatch.setattr(
        training_gate, "run_context", lambda state: SimpleNamespace(takeover_ran=ran)
    )
    host = SimpleNamespace(
        name="ct200",
        data={"pct_node": "pve1", "pct_vmid": 200},
        state=object(),
        log_styled=lambda *a, **k: None,
    )
    training_gate.wait_for(host, None, "the venv switch", [HAND_RUN], consent=True)
    assert recorded == []  # deferred to the takeover, which stops it
    training_gate.wait_for(host, None, "the venv switch", [trainer], consent=True)
    assert recorded == [trainer]  # the takeover never stops it: the change waits
    # once the node's takeover has run (the container pass after it), none follows: it waits
    recorded.clear()
    ran.add("pve1")
    training_gate.wait_for(host, None, "the venv switch", [HAND_RUN], consent=True)
    assert recorded == [HAND_RUN]


# --- the venv switch and the unit's start -------------------------------------------------------


def switch_commands(monkeypatch, trainers):
    waits = gate(monkeypatch, training, trainers)
    monkeypatch.setattr(training, "mark_container_only", lambda host: None)
    monkeypatch.setattr(training, "remember", lambda update: None)
    s = settings_with()
    build = s.torch.build_name
    state = {
        "venvs": {build: {"link": f"{build}.b1", "real": f"{build}.b1"}},
        "venv_link": None,
        "venv_path_is_dir": True,
        "unit_digest": "x",
    }
    monkeypatch.setattr(training, "container_state", lambda: state)
    return " ".join(str(c) for c in training.live_build_and_unit._inner(settings=s)), waits


def test_the_venv_switch_goes_ahead_under_pvegpus_own_unit(monkeypatch):
    commands, waits = switch_commands(monkeypatch, [OURS])
    assert waits == [] and "/root/venv.pvegpu-tmp" in commands
    commands, waits = switch_commands(monkeypatch, [HAND_RUN])
    assert len(waits) == 1 and "/root/venv.pvegpu-tmp" not in commands


def test_the_switch_and_the_start_read_the_container_again_right_before_they_act(monkeypatch):
    """However recent the run's last read (a compile check can take minutes with nothing run
    since), the venv switch and the unit's start ask with a fresh read."""
    asked = []
    switch_commands(monkeypatch, [])
    monkeypatch.setattr(training, "running_here", lambda host, *a, **k: asked.append(k) or [])
    s = settings_with()
    list(training.live_build_and_unit._inner(settings=s))
    monkeypatch.setattr(training, "neighbours_here", lambda host, gpus: [])
    monkeypatch.setattr(training, "boot_starters_here", lambda host, unit: [])
    list(training.beside_others(s, "dflash-train.service", enable=True, start=True))
    assert [k.get("fresh") for k in asked] == [True, True], asked


def test_the_unit_is_not_enabled_beside_what_starts_a_second_trainer_at_boot(monkeypatch):
    waits = gate(monkeypatch, training, [])
    monkeypatch.setattr(training, "neighbours_here", lambda host, gpus: [])
    monkeypatch.setattr(training, "boot_starters_here", lambda host, unit: ["root: @reboot x"])
    monkeypatch.setattr(
        training, "container_state", lambda: {"unit_active": "active", "unit_enabled": "disabled"}
    )
    monkeypatch.setattr(training, "start_state", lambda settings, state: ("active", []))
    monkeypatch.setattr(training, "old_units_retired", lambda settings, state: iter(()))
    fail_lines(monkeypatch, training)
    commands = [str(c) for c in training.unit_running._inner(settings=settings_with())]
    assert not any("systemctl enable" in c for c in commands), commands
    assert waits == [(f"systemctl enable {UNIT}", None)]
    commands = [
        str(c) for c in training.unit_running._inner(settings=settings_with(restart_training=True))
    ]
    assert commands == [
        f"fail: {UNIT} not enabled: root: @reboot x still starts a training at boot"
    ]


# --- rebuild=venv and rebuild=container ---------------------------------------------------------


@pytest.mark.parametrize("active", ["active", "activating", "reloading", "deactivating"])
def test_rebuild_venv_is_refused_while_pvegpus_unit_runs_in_any_state(monkeypatch, active):
    monkeypatch.setattr(rebuild, "host", SimpleNamespace(name="ct200"))
    monkeypatch.setattr(rebuild, "running_here", lambda host, *a, **k: [])
    monkeypatch.setattr(rebuild, "container_state", lambda: {"unit_active": active})
    fail_lines(monkeypatch, rebuild)
    s = settings_with(rebuild="venv")
    out = list(rebuild.venv_rebuild_allowed._inner(policy=s.policy, training=s.training))
    assert out == [
        f"fail: {UNIT} is running: rebuild=venv refused; stop it, or add "
        "--data restart_training=true"
    ]


def node_read_with(procs: list[dict], unit_active="inactive") -> dict:
    apps = [
        {"pid": p["pid"], "gpu_uuid": "GPU-0", "argv": p["argv"], "cgroup": p["cgroup"]}
        for p in procs
    ]
    ct = {
        "exists": True,
        "status": "running",
        "live": {"unit_active": unit_active, "units": []},
        "processes": procs,
        "config": {},
    }
    return {
        "containers": {"200": ct},
        "compute_apps": apps,
        "gpus": [{"index": 0, "uuid": "GPU-0"}],
    }


@pytest.fixture
def destroy(monkeypatch):
    """container_destroyed's body on node host pve1 for CT 200 with the read ``doc``: the real
    gate (training_gate.running_here) asks about the container it names."""

    def body(doc, **overrides):
        host = SimpleNamespace(name="pve1", data={}, state=SimpleNamespace(is_executing=True))
        monkeypatch.setattr(rebuild, "host", host)
        monkeypatch.setattr(training_gate, "current_read", lambda h, node, vmid, fresh=False: doc)
        monkeypatch.setattr(rebuild, "current_read", lambda h, node, vmid, fresh=False: doc)
        monkeypatch.setattr(
            training_gate, "run_context", lambda state: SimpleNamespace(settings={})
        )
        fail_lines(monkeypatch, rebuild)
        s = settings_with(rebuild="container", **overrides)
        return [str(c) for c in rebuild.container_destroyed._inner(vmid=200, settings=s)]

    return body


def test_rebuild_container_asks_about_the_container_it_destroys(destroy):
    hand = {
        "pid": 4242,
        "ppid": 1,
        "argv": SCRIPT,
        "cwd": "/",
        "cgroup": "0::/lxc/200/ns/init.scope",
    }
    out = destroy(node_read_with([hand]))
    assert len(out) == 1 and out[0].startswith("fail: ") and "4242" in out[0], out
    assert not any("pct destroy" in c for c in out)


def test_rebuild_container_is_refused_while_pvegpus_unit_runs(destroy):
    out = destroy(node_read_with([], unit_active="active"))
    assert out == [
        f"fail: {UNIT} is running: rebuild=container refused; stop it, or add "
        "--data restart_training=true"
    ]


def test_rebuild_container_destroys_a_container_where_nothing_runs(destroy):
    out = destroy(node_read_with([]))
    assert out[-1] == "pct set 200 --protection 0 && pct destroy 200 --purge"


def test_every_kind_but_a_training_blocks_even_with_consent():
    from pvegpu.plan.running_training import blocking

    kinds = [Trainer(1, "t", HAND, kind=k) for k in (TRAINING, GPU_PROCESS, UNKNOWN)]
    assert [t.kind for t in blocking(kinds, True)] == [GPU_PROCESS, UNKNOWN]
    assert blocking([OURS], False) == []
