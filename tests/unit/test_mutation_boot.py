"""Boot persistence files: behaviours the mutation run (bench/mutation.py) found unpinned."""

import jinja2
import pytest

from pvegpu.plan.boot import _env, manages_persistenced, render_modules, render_uvm_unit


def description(unit_text):
    return next(ln for ln in unit_text.splitlines() if ln.startswith("Description="))


def test_modules_file_is_exactly_the_header_and_one_module_per_line():
    assert render_modules(("nvidia-modeset",)) == (
        "# Rendered by pvegpu from templates/modules-load-nvidia.conf.j2: NVIDIA modules loaded at"
        " boot\n# (systemd-modules-load), so the device majors exist before GPU containers start."
        "\nnvidia\nnvidia_uvm\nnvidia_modeset\n"
    )


def test_uvm_unit_names_the_gpu_nodes_it_creates():
    assert description(render_uvm_unit([2, 0, 1, 1])) == (
        "Description=NVIDIA device nodes for GPU containers (nvidia0-2, nvidiactl, nvidia-uvm)"
    )
    assert "(nvidia0-1, nvidiactl" in description(render_uvm_unit([1, 0]))
    assert "(nvidia5, nvidiactl" in description(render_uvm_unit([5]))
    # no GPU known yet (driver not loaded on the first run): still a valid unit
    assert "(nvidia0, nvidiactl" in description(render_uvm_unit([]))
    assert render_uvm_unit(range(8)).endswith("WantedBy=multi-user.target\n")


def test_uvm_unit_creates_the_modeset_node_when_asked():
    execs = [
        ln
        for ln in render_uvm_unit([0], extras=("nvidia-modeset",)).splitlines()
        if ln.startswith("ExecStart=")
    ]
    assert execs[0] == "ExecStart=/usr/bin/nvidia-modprobe -c 0 -c 255 -m"


def test_a_template_variable_left_unset_fails_instead_of_rendering_empty(tmp_path):
    (tmp_path / "t.j2").write_text("ExecStart={{ tool }} --verbose\n")
    with pytest.raises(jinja2.UndefinedError):
        _env(tmp_path).get_template("t.j2").render()


def test_persistenced_unit_written_when_no_unit_file_is_reported():
    assert manages_persistenced({})


def test_persistenced_left_alone_names_every_outside_pid_and_an_admins_unit():
    from pvegpu.plan.boot import persistenced_left_alone

    assert persistenced_left_alone({"persistenced": {"outside_pids": [812, 813]}}) == (
        "nvidia-persistenced already runs outside systemd (pid 812, 813): left alone (pvegpu "
        "neither writes nor starts nvidia-persistenced.service)"
    )
    assert persistenced_left_alone({"persistenced": {"outside_pids": [], "unit_ours": False}}) == (
        "/etc/systemd/system/nvidia-persistenced.service is not pvegpu's (no pvegpu marker on its "
        "first line): left alone (never rewritten, enabled or started by pvegpu)"
    )
    assert persistenced_left_alone({"persistenced": {"unit_ours": None}}) is None
    assert persistenced_left_alone({}) is None


def test_the_fabric_wait_runs_the_default_nvidia_smi():
    unit = render_uvm_unit([0, 1], fabric=True)
    assert "/usr/bin/nvidia-smi " in unit
    assert "/usr/bin/nvidia-smi " not in render_uvm_unit([0, 1])
