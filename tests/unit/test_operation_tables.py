"""Operations as tables, the way pyinfra tests its own (tests/operations/<op>/<case>.json: facts
in, commands out): each case gives the fact document an operation reads and the exact commands
it yields, so the glue inside operations (command order, variants) is pinned without a node.

The operation's body is called through pyinfra's ``_inner``; its fact readers are replaced by
the case's document. A yielded ``fail``/``note`` shows as ``fail: <lines>``/``note: <lines>``.
"""

from __future__ import annotations

import copy
import inspect
import os
import re
import subprocess
from types import SimpleNamespace

import pytest
from pyinfra.api import FunctionCommand, StringCommand

from pvegpu.digests import text_digest
from pvegpu.operations import proxmox, python_env, training
from pvegpu.operations.progress import ProgressCommand
from pvegpu.plan import boot
from pvegpu.plan.start_watch import watch_script
from pvegpu.settings import Settings, defaults


def shown(command) -> str:
    """A yielded command as a line of the table (a file write as ``write <path> <mode>``)."""
    if isinstance(command, ProgressCommand):
        return str(command)  # the shell command it runs, with progress lines
    if isinstance(command, FunctionCommand):
        kind = command.function.__qualname__.split(".")[0]
        lines = inspect.getclosurevars(command.function).nonlocals.get("lines")
        return f"{kind}: {' | '.join(lines or ())}"
    write = WRITE.fullmatch(str(command))
    if write:
        return f"write {write['path']} {write['mode'] or '-'}"
    return str(command)


WRITE = re.compile(
    r"printf %s \S+ \| base64 -d > (?P<path>\S+)\.pvegpu-tmp"
    r"(?: && chmod (?P<mode>\d+) \S+)? && mv -f \S+ \S+"
)


def settings(**overrides) -> Settings:
    return Settings.from_data({**defaults(), **overrides})


# ---- python_env.promotion, then live_switch: the container document in, the link switches out ---

S = settings(venvs_dir="/root/venvs", venv_path="/root/venv")
B = S.build_venv  # /root/venvs/torch-2.11.0-cu130
N = S.torch.build_name
VENV_SELECTED = {
    "already live: nothing": (
        {"venvs": {N: {"link": f"{N}.b1", "real": f"{N}.b1"}}, "venv_link": B},
        [],
    ),
    "first build: promote .next to .b1, link it, switch the live link": (
        {"venvs": {f"{N}.next": {}}, "venv_link": None},
        [
            f"mv -T {B}.next /root/venvs/{N}.b1 && ln -sfn {N}.b1 {B}.pvegpu-tmp && "
            f"mv -T {B}.pvegpu-tmp {B} && touch {B}/.pvegpu-selected && "
            f"ln -sfn {B} /root/venv.pvegpu-tmp && mv -T /root/venv.pvegpu-tmp /root/venv"
        ],
    ),
    "a repaired live build: promote .next to .b2, the live link stays": (
        {
            "venvs": {N: {"link": f"{N}.b1", "real": f"{N}.b1"}, f"{N}.b1": {}, f"{N}.next": {}},
            "venv_link": B,
        },
        [
            f"mv -T {B}.next /root/venvs/{N}.b2 && ln -sfn {N}.b2 {B}.pvegpu-tmp && "
            f"mv -T {B}.pvegpu-tmp {B} && touch {B}/.pvegpu-selected"
        ],
    ),
    "swap to another built variant: only the live link moves": (
        {
            "venvs": {N: {"link": f"{N}.b1", "real": f"{N}.b1"}},
            "venv_link": "/root/venvs/torch-2.11.0-cu128",
        },
        [
            f"touch {B}/.pvegpu-selected && ln -sfn {B} /root/venv.pvegpu-tmp && "
            "mv -T /root/venv.pvegpu-tmp /root/venv"
        ],
    ),
    "a hand-made venv at venv_path: kept aside, never deleted": (
        {
            "venvs": {N: {"link": f"{N}.b1", "real": f"{N}.b1"}},
            "venv_link": None,
            "venv_path_is_dir": True,
        },
        [
            "mv -T /root/venv /root/venv.pre-pvegpu.0 && "
            f"touch {B}/.pvegpu-selected && ln -sfn {B} /root/venv.pvegpu-tmp && "
            "mv -T /root/venv.pvegpu-tmp /root/venv"
        ],
    ),
}


def promote_then_switch(doc: dict) -> list[str]:
    """The commands of ``venv_promoted`` and then (after verify) ``live_build_and_unit``'s switch,
    the document patched in between as the run does (``remember``), joined into one line."""
    cmds, update = python_env.promotion(doc, S.torch, S.python_env)
    doc = copy.deepcopy(doc)
    if update:
        update(doc)
    more, _ = python_env.live_switch(doc, S.torch, S.python_env, now=0)
    return [" && ".join(cmds + more)] if cmds + more else []


@pytest.mark.parametrize("case", list(VENV_SELECTED))
def test_venv_selected_table(case):
    doc, commands = VENV_SELECTED[case]
    assert promote_then_switch(doc) == commands


# ---- proxmox.gpu_passthrough: the node document in, modprobe/pct commands out, in order -----

DEVICES = {f"/dev/nvidia{i}": {"major": 195, "minor": i} for i in range(2)}
DEVICES.update(
    {"/dev/nvidiactl": {"major": 195, "minor": 255}, "/dev/nvidia-uvm": {"major": 508, "minor": 0}}
)
MAJORS = {"nvidia": 195, "nvidia-uvm": 508}
GPUS = [{"index": i, "minor": i} for i in range(2)]
DEV_ARGS = (
    "--dev0 /dev/nvidia0 --dev1 /dev/nvidia1 --dev2 /dev/nvidiactl "
    "--dev3 /dev/nvidia-uvm --dev4 /dev/nvidia-uvm-tools"
)
WAIT = (
    "i=0; until pct exec 200 -- true >/dev/null 2>&1; do i=$((i+1)); [ $i -ge 60 ] && "
    "echo 'CT 200 started but pct exec does not answer after 60 s' >&2 && exit 1; sleep 1; "
    "done"
)
MODPROBE_UVM = (
    "nvidia-modprobe -u -c 0 || { echo 'nvidia-modprobe -u -c 0 failed on n1: the "
    "NVIDIA device nodes cannot be created (is the driver'\"'\"'s module loaded? "
    "check dmesg)' >&2; exit 1; }"
)


def node_doc(status: str, devices=DEVICES, config=None) -> dict:
    return {
        "pve_version": "9.0.3",
        "devices": devices,
        "majors": MAJORS,
        "gpus": GPUS,
        "containers": {
            "200": {
                "exists": True,
                "status": status,
                "config": config or {},
                "raw_lxc": [],
                "text": "arch: amd64\n",
                "live": None,
            }
        },
    }


GPU_PASSTHROUGH = {
    "no container yet (preview): nothing": ({"containers": {"200": {"exists": False}}}, []),
    "stopped, nothing passed: create the missing uvm-tools node, set devN, start, wait": (
        node_doc("stopped"),
        [MODPROBE_UVM, f"pct set 200 {DEV_ARGS}", "pct start 200", WAIT],
    ),
}


@pytest.mark.parametrize("case", list(GPU_PASSTHROUGH))
def test_gpu_passthrough_table(monkeypatch, case):
    doc, commands = GPU_PASSTHROUGH[case]
    monkeypatch.setattr(proxmox, "read_state", lambda vmids, ct_detail: doc)
    monkeypatch.setattr(proxmox, "host", SimpleNamespace(name="n1"))
    got = [
        shown(c)
        for c in proxmox.gpu_passthrough._inner(
            vmid=200, gpus=S.gpus, policy=S.policy, training=S.training
        )
    ]
    assert got == commands


# A pct whose hot-plug fails while the container runs (pct then writes nothing) and which answers
# for pvegpu's unit inside as systemd would; every call is logged, one line each.
FAILING_HOTPLUG_PCT = """#!/bin/sh
d=$(dirname "$0")
echo "$*" >> "$d/calls"
case "$1" in
set) [ -e "$d/down" ] || { echo "hot-plug failed" >&2; exit 255; } ;;
exec) case "$*" in
    *" systemctl show "*) if [ -e "$d/unit-stopped" ]; then echo inactive; else echo active; fi ;;
    *" systemctl stop "*) touch "$d/unit-stopped" ;;
    esac ;;
shutdown) touch "$d/down" ;;
esac
"""


def test_a_failed_hotplug_stops_pvegpus_unit_before_the_container_shuts_down(monkeypatch, tmp_path):
    """The hot-plug's shell line run by sh against that pct: its unit gets its own stop (and
    TimeoutStopSec: the checkpoint) before `pct shutdown`, then the entry is set and CT started."""
    from tests.unit.test_passthrough import ct, dev_config, live_view
    from tests.unit.test_passthrough import state as node_state

    config, live = dev_config(), live_view()
    del config["dev10"], live["devices"]["/dev/nvidia-uvm-tools"]
    doc = dict(node_state(), pve_version="9.1.1", pve_container="6.0.18")
    doc["containers"] = {"200": ct(config, live=live)}
    monkeypatch.setattr(proxmox, "read_state", lambda vmids, ct_detail: doc)
    monkeypatch.setattr(proxmox, "host", SimpleNamespace(name="n1"))
    s = settings(restart_training=True)
    commands = proxmox.gpu_passthrough._inner(
        vmid=200, gpus=s.gpus, policy=s.policy, training=s.training
    )
    line = next(str(c) for c in commands if str(c).startswith("pct set 200 --dev10 "))
    (tmp_path / "pct").write_text(FAILING_HOTPLUG_PCT)
    (tmp_path / "pct").chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    done = subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [
        "set 200 --dev10 /dev/nvidia-uvm-tools",
        "exec 200 -- systemctl show -p ActiveState --value dflash-train.service",
        "exec 200 -- systemctl stop dflash-train.service",
        "shutdown 200 --timeout 960",
        "set 200 --dev10 /dev/nvidia-uvm-tools",
        "start 200",
    ]


# ---- proxmox.boot_persistence: the node's file digests and units in, writes and enables out -

UVM = "/etc/systemd/system/nvidia-uvm-init.service"
PERS = "/etc/systemd/system/nvidia-persistenced.service"
MODULES = "/etc/modules-load.d/nvidia.conf"


def boot_doc(**overrides) -> dict:
    doc = {
        "gpus": GPUS,
        "devices": DEVICES,
        "boot_files": {},
        "units": {},
        "tools": {
            "nvidia-modprobe": "/usr/bin/nvidia-modprobe",
            "nvidia-persistenced": "/usr/bin/nvidia-persistenced",
        },
    }
    return {**doc, **overrides}


def done_doc() -> dict:
    """A node where boot_persistence already ran: digests of what it writes, units running."""
    texts = {
        MODULES: boot.render_modules(()),
        UVM: boot.render_uvm_unit([0, 1], "/usr/bin/nvidia-modprobe", ()),
        PERS: boot.render_persistenced_unit("/usr/bin/nvidia-persistenced"),
    }
    running = {"paths": [], "enabled": "enabled", "active": "active"}
    return boot_doc(
        boot_files={p: text_digest(text) for p, text in texts.items()},
        units={
            "nvidia-uvm-init.service": running,
            "nvidia-persistenced.service": dict(running, paths=[PERS]),
        },
    )


BOOT_PERSISTENCE = {
    "a fresh node: write the three files, reload, enable both units": (
        boot_doc(),
        [
            "mkdir -p /etc/modules-load.d",
            f"write {MODULES} 0644",
            "mkdir -p /etc/systemd/system",
            f"write {UVM} 0644",
            "mkdir -p /etc/systemd/system",
            f"write {PERS} 0644",
            "systemctl daemon-reload",
            "systemctl enable --now nvidia-uvm-init.service nvidia-persistenced.service",
        ],
    ),
    "Debian's persistenced unit exists: not written, only enabled": (
        boot_doc(
            units={
                "nvidia-persistenced.service": {
                    "paths": ["/lib/systemd/system/nvidia-persistenced.service"],
                    "enabled": "disabled",
                    "active": "inactive",
                }
            }
        ),
        [
            "mkdir -p /etc/modules-load.d",
            f"write {MODULES} 0644",
            "mkdir -p /etc/systemd/system",
            f"write {UVM} 0644",
            "systemctl daemon-reload",
            "systemctl enable --now nvidia-uvm-init.service nvidia-persistenced.service",
        ],
    ),
    "already done: nothing (a second deploy is idempotent)": (done_doc(), []),
    "no node document (preview before the node answers): nothing": ({}, []),
}


@pytest.mark.parametrize("case", list(BOOT_PERSISTENCE))
def test_boot_persistence_table(monkeypatch, case):
    doc, commands = BOOT_PERSISTENCE[case]
    monkeypatch.setattr(proxmox, "read_state", lambda *a, **k: doc)
    got = [steps(str(c)) for c in proxmox.boot_persistence._inner(gpus=settings().gpus)]
    assert len(got) <= 1  # one node command, its steps in order
    assert [shown(StringCommand(step)) for step in (got[0] if got else [])] == commands


def steps(command: str) -> list[str]:
    """The steps of a command joined with ``&&`` (a file write's own ``&& chmod``/``&& mv``
    kept with it)."""
    found: list[str] = []
    for part in command.split(" && "):
        if found and part.startswith(("chmod ", "mv -f ")):
            found[-1] += " && " + part
        else:
            found.append(part)
    return found


# ---- training.unit_running: the unit's state in, enable/start commands (or a refusal) out ----

UNIT = "dflash-train.service"
STOPPING = (
    f"fail: {UNIT} is stopping (deactivating): not started; run deploy.py again once it "
    f"has stopped (`systemctl is-active {UNIT}` in the container says inactive or failed)"
)
# every start the deploy makes is watched until the trainer is up (training_start_watch_s)
WATCH = watch_script(UNIT, 60, 200)
UNIT_RUNNING = {
    "stopped: clear leftovers, start (its start count reset first)": (
        {"unit_active": "inactive", "unit_enabled": "enabled"},
        {},
        [
            "clear_leftovers_command: ",
            f"systemctl reset-failed {UNIT}; systemctl start {UNIT}",
            WATCH,
        ],
    ),
    "failed (start limit): reset the failed state, then start": (
        {"unit_active": "failed", "unit_enabled": "enabled"},
        {},
        [
            "clear_leftovers_command: ",
            f"systemctl reset-failed {UNIT}; systemctl start {UNIT}",
            WATCH,
        ],
    ),
    "a stop in progress: fail the host with one line, start nothing": (
        {"unit_active": "deactivating", "unit_enabled": "enabled"},
        {},
        [STOPPING],
    ),
    "a stop in progress, restart_training=true: the same (never a second stop)": (
        {"unit_active": "deactivating", "unit_enabled": "enabled"},
        {"restart_training": True},
        [STOPPING],
    ),
}


@pytest.mark.parametrize("case", list(UNIT_RUNNING))
def test_unit_running_table(monkeypatch, case):
    doc, overrides, commands = UNIT_RUNNING[case]
    monkeypatch.setattr(training, "container_state", lambda: doc)
    monkeypatch.setattr(training, "host", SimpleNamespace(name="ct200", data={"pct_vmid": 200}))
    got = [shown(c) for c in training.unit_running._inner(settings=settings(**overrides))]
    assert got == commands
