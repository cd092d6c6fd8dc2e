"""Boot persistence on the node: the rendered units are valid systemd units (systemd-analyze
verify), create the right nodes with nvidia-modprobe's real grammar, and run before pve-guests."""

import shutil
import subprocess
from unittest import mock

import pytest

from pvegpu.plan.boot import (
    FABRIC_STATES,
    fabric_answer,
    manages_persistenced,
    on_fabric,
    render_modules,
    render_persistenced_unit,
    render_uvm_unit,
    uvm_init_commands,
)
from pvegpu.probes import node_site


def exec_lines(text):
    return [ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("ExecStart=")]


def test_uvm_unit_creates_every_gpu_node_then_the_uvm_nodes_before_guests():
    text = render_uvm_unit(range(8))
    assert exec_lines(text) == [
        "/usr/bin/nvidia-modprobe -c 0 -c 1 -c 2 -c 3 -c 4 -c 5 -c 6 -c 7 -c 255",
        # with -u a -c N is the uvm base minor: nvidia-uvm (N) and nvidia-uvm-tools (N+1)
        "/usr/bin/nvidia-modprobe -u -c 0",
    ]
    assert "Before=pve-guests.service" in text.splitlines()
    assert "Type=oneshot" in text and "RemainAfterExit=yes" in text
    assert "WantedBy=multi-user.target" in text
    assert uvm_init_commands([1, 0], ("nvidia-modeset",)) == ["-c 0 -c 1 -c 255 -m", "-u -c 0"]


def test_modules_load_lists_the_modules_one_per_line():
    lines = [ln for ln in render_modules(()).splitlines() if not ln.startswith("#")]
    assert lines == ["nvidia", "nvidia_uvm"]


def test_persistenced_unit_only_where_no_other_exists():
    assert manages_persistenced({"paths": []})
    assert manages_persistenced({"paths": ["/etc/systemd/system/nvidia-persistenced.service"]})
    assert not manages_persistenced({"paths": ["/lib/systemd/system/nvidia-persistenced.service"]})
    assert exec_lines(render_persistenced_unit()) == ["/usr/bin/nvidia-persistenced --verbose"]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_rendered_node_units_pass_systemd_analyze_verify(tmp_path):
    # verify resolves ExecStart binaries: point them at one that exists on the controller.
    tool = shutil.which("true")
    units = {
        "nvidia-uvm-init.service": render_uvm_unit(range(8), nvidia_modprobe=tool),
        "nvidia-persistenced.service": render_persistenced_unit(nvidia_persistenced=tool),
        # an NVSwitch board's (its fabric wait: the shell quoting, $$ and %% as systemd reads)
        "nvidia-uvm-fabric.service": render_uvm_unit(range(8), nvidia_modprobe=tool, fabric=True),
    }
    for name, text in units.items():
        (tmp_path / name).write_text(text)
    p = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / n) for n in units)],
        capture_output=True,
        text=True,
    )
    problems = [ln for ln in p.stderr.splitlines() if "nvidia" in ln]
    assert p.returncode == 0 and not problems, p.stderr
    # and the check can fail: a broken unit is reported
    (tmp_path / "broken.service").write_text(
        units["nvidia-uvm-init.service"].replace("Type=oneshot", "Type=oneshoot")
    )
    p = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / "broken.service")],
        capture_output=True,
        text=True,
    )
    assert "broken.service" in p.stderr


def test_uvm_unit_on_an_nvswitch_board_pulls_in_fabric_manager_before_guests():
    plain = render_uvm_unit(range(8)).splitlines()
    assert not [line for line in plain if "fabricmanager" in line]  # unchanged without a fabric
    fabric = render_uvm_unit(range(8), fabric=True).splitlines()
    assert "After=nvidia-fabricmanager.service" in fabric
    assert "Wants=nvidia-fabricmanager.service" in fabric
    assert fabric.index("Wants=nvidia-fabricmanager.service") < fabric.index("[Service]")
    assert "Before=pve-guests.service" in fabric


#: real nvidia-smi's answer to a field its driver predates (docs/real-tools.md)
UNKNOWN_FIELD = 'Field "fabric.state" is not a valid field to query.\n'


def answer(text: str) -> str:
    """One call of the stand-in nvidia-smi: ``text`` for each of 2 GPUs (``state, status``),
    or the unknown-field refusal (stdout, then exit 2) as the real tool prints it."""
    if text == UNKNOWN_FIELD:
        return f"printf '%s\\n' '{UNKNOWN_FIELD.strip()}'; exit 2"
    return f"printf '%s\\n%s\\n' '{text}' '{text}'"


def fabric_wait(tmp_path, answers: list[str], wait_s: int):
    """The rendered unit's fabric wait, run by sh as systemd would (``$$`` is ``$``, ``%%`` is
    ``%``), against an nvidia-smi that gives ``answers`` in turn (then the last one)."""
    smi = tmp_path / "nvidia-smi"
    calls = tmp_path / "calls"
    calls.unlink(missing_ok=True)
    smi.write_text(
        f"#!/bin/sh\nn=$(cat {calls} 2>/dev/null || echo 0); echo $((n+1)) > {calls}\n"
        + "case $n in\n"
        + "".join(f"  {i}) {answer(s)};;\n" for i, s in enumerate(answers[:-1]))
        + f"  *) {answer(answers[-1])};;\nesac\n"
    )
    smi.chmod(0o755)
    unit = render_uvm_unit(range(2), fabric=True, nvidia_smi=str(smi), fabric_wait_s=wait_s)
    (line,) = [x for x in unit.splitlines() if x.startswith("ExecStart=/bin/sh -c ")]
    script = line.removeprefix("ExecStart=/bin/sh -c ").strip("'").replace("$$", "$")
    run = subprocess.run(
        ["sh", "-c", script.replace("%%", "%")], capture_output=True, text=True, timeout=60
    )
    return run, int(calls.read_text())


def test_on_a_fabric_the_boot_unit_waits_bounded_until_every_gpu_registered(tmp_path):
    """Fabric Manager's unit is up before the GPUs have registered with the fabric (CUDA error
    802 until then): the boot unit waits for fabric.state Completed on every GPU, bounded."""
    steps = ["Not Started, N/A", "In Progress, N/A", "Completed, Success"]
    run, calls = fabric_wait(tmp_path, steps, 30)
    assert (run.returncode, calls) == (0, 3), run.stderr
    run, calls = fabric_wait(tmp_path, ["In Progress, N/A"], 1)
    assert run.returncode == 1 and calls >= 1
    assert run.stderr.startswith("NVIDIA GPUs not registered with the NVSwitch fabric after 1 s")
    assert "fabric.state" not in render_uvm_unit(range(8))  # no fabric: no wait


@pytest.mark.parametrize(
    "answer_, meaning",
    [
        ("Not Supported, Success", "none"),  # a single-GPU H100/H200, some GB200 boards
        ("N/A, N/A", "none"),  # a GPU without a fabric (GeForce, L40S; pre-Hopper HGX)
        ("[N/A], [N/A]", "none"),  # a value the driver cannot give
        ("[Not Supported], [Not Supported]", "none"),
        (UNKNOWN_FIELD, "none"),  # a driver older than the field
        ("Completed, Insufficient Resources", "failed"),
        ("Completed, Success", "registered"),
    ],
)
def test_the_wait_reads_every_real_fabric_answer_as_the_preflight_does(tmp_path, answer_, meaning):
    """No fabric to wait for ends the wait at once and the unit succeeds; a failed registration
    fails it at once with one line: never the whole wait and a failed unit on every boot. The
    node probe's rows mean the same to the preflight (fabric_answer)."""
    run, calls = fabric_wait(tmp_path, [answer_], 30)
    assert calls == 1, (calls, run.stderr)
    lines = (run.stdout + run.stderr).splitlines()
    if meaning == "failed":
        assert run.returncode == 1
        assert lines == [
            "NVIDIA GPUs failed to register with the NVSwitch fabric (fabric.state, fabric.status:"
            f" {answer_}): CUDA cannot use them; see journalctl -u nvidia-fabricmanager"
        ]
    else:
        assert run.returncode == 0, run.stderr
        assert lines == (
            ["nvidia-smi has no fabric.state on this driver: not waiting for the NVSwitch fabric"]
            if answer_ == UNKNOWN_FIELD
            else []
        )
    rows = probe_rows(answer_)
    assert [fabric_answer(r) for r in rows] == ([meaning] * 2 if rows else [])
    assert on_fabric({"fabric": rows}) == (meaning != "none")


def probe_rows(answer_: str) -> list[dict]:
    """The node probe's rows (probes/node_site.py fabric()) for the same nvidia-smi answer."""
    out = UNKNOWN_FIELD if answer_ == UNKNOWN_FIELD else f"GPU-0, {answer_}\nGPU-1, {answer_}\n"
    code = 2 if answer_ == UNKNOWN_FIELD else 0
    with mock.patch.object(node_site, "run", lambda argv: (code, out, "")):
        return node_site.fabric()


def test_the_node_probe_knows_the_fabric_states_the_plan_knows():
    assert node_site.FABRIC_STATES == FABRIC_STATES  # the probe runs alone: its own copy
