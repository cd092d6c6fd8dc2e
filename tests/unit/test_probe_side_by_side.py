"""The container probes start their read-only commands together (issue 14): each one's start-up
runs beside the others' instead of after them. Fake tools that wait for each other's flag file
show it: run one after the other, the first one gives up and the probe reports its fallback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pvegpu.facts.probe import parse_probe_output, probe_command, probe_source

# Linux's limit on one argument (MAX_ARG_STRLEN).
MAX_ARG_STRLEN = 131072

# Waits (at most 10 s) for $1, then prints $2; touches $3 first when given.
WAITER = """#!/bin/sh
[ -z "{touch}" ] || touch "{touch}"
i=0; while [ ! -e "{wait}" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
[ -e "{wait}" ] && echo "{out}" || echo gave-up
{tail}"""


def tool(path, wait, out, touch="", tail=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(WAITER.format(wait=wait, out=out, touch=touch, tail=tail))
    path.chmod(0o755)
    return path


def run_probe(name, args, env=None):
    command = probe_command(name, args, python=sys.executable)
    if len(command) >= MAX_ARG_STRLEN:  # only under mutmut: guard.py then holds every mutant
        pytest.skip("probe command longer than Linux allows one argument (mutated guard.py)")
    p = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    return parse_probe_output(name, p.stdout.splitlines())


def test_ct_state_starts_its_commands_together_and_does_not_count_them_as_users(tmp_path):
    uv_flag, py_flag = tmp_path / "uv-started", tmp_path / "python-started"
    venvs = tmp_path / "venvs"
    (venvs / "torch-2.11.0-cu130.b1").mkdir(parents=True)
    # the interpreter the probe asks for its version lives inside a build and is still running
    # (1 s more) while the probe reads /proc: it is the probe's own, not a user of that build
    python = tool(
        venvs / "torch-2.11.0-cu130.b1" / "bin" / "python",
        uv_flag,
        "3.11.2",
        touch=py_flag,
        tail="sleep 1\n",
    )
    uv = tool(tmp_path / "uv", py_flag, "uv 0.13.9", touch=uv_flag)
    args = {
        "uv_bin": str(uv),
        "venvs_dir": str(venvs),
        "venv_path": str(tmp_path / "venv"),
        "python": str(python),
    }
    doc = run_probe("ct_state", args)
    assert doc["uv_version"] == "0.13.9" and doc["python"]["version"] == "3.11.2"
    assert doc["venvs"]["torch-2.11.0-cu130.b1"]["in_use"] == []


def test_verification_starts_smi_the_unit_state_and_pip_check_together(tmp_path):
    flags = {n: tmp_path / f"{n}-started" for n in ("smi", "systemctl", "uv")}
    bindir = tmp_path / "bin"
    # each waits for the next one's flag: only side by side do all three answer
    tool(
        bindir / "nvidia-smi",
        flags["systemctl"],
        "No devices were found",
        touch=flags["smi"],
        tail="exit 6\n",
    )
    tool(bindir / "systemctl", flags["uv"], "active", touch=flags["systemctl"])
    uv = tool(tmp_path / "uv", flags["smi"], "Checked 1 package", touch=flags["uv"])
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    args = {
        "venv": str(venv),
        "uv_bin": str(uv),
        "torch_inner": probe_source("torch_inner"),
        "compile_inner": None,
        "smi_query": "index,name",
        "timeout": 60,
        "unit_name": "dflash-train.service",
    }
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    doc = run_probe("verification", args, env)
    assert doc["smi"]["stdout"].strip() == "No devices were found"
    assert doc["unit"]["active"] == "active"
    assert doc["pip_check"] == {"rc": 0, "output": "Checked 1 package"}


def test_the_node_probe_starts_the_boot_units_state_with_nvidia_smi(tmp_path):
    unit = "systemd-journald.service"  # a unit file this machine has (the probe reads it)
    smi_flag, systemctl_flag = tmp_path / "smi-started", tmp_path / "systemctl-started"
    bindir = tmp_path / "bin"
    # nvidia-smi answers only once `systemctl is-active` runs, and the other way round
    tool(bindir / "nvidia-smi", systemctl_flag, "", touch=smi_flag, tail="exit 9\n")
    tool(bindir / "systemctl", smi_flag, "active", touch=systemctl_flag)
    args = {"vmids": [], "units": [unit], "boot_files": [], "data_dir": str(tmp_path)}
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    doc = run_probe("node_state", args, env)
    assert doc["units"][unit]["active"] == "active"
    assert doc["gpu_error"] == []  # nvidia-smi saw systemctl start (it printed nothing, exit 9)


# A torch that says when its import ran and finds CUDA only once nvidia-smi has finished.
GATED_TORCH = """import os, types
open(os.path.join(os.environ["FLAGS"], "torch-imported"), "w").close()
__version__ = "2.11.0+cu130"
version = types.SimpleNamespace(cuda="13.0")
cuda = types.SimpleNamespace(
    is_available=lambda: os.path.exists(os.path.join(os.environ["FLAGS"], "smi-done")))
"""


def test_verification_imports_torch_beside_nvidia_smi_and_calls_cuda_after_it(tmp_path):
    site, bindir = tmp_path / "site", tmp_path / "bin"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(GATED_TORCH)
    # nvidia-smi answers once torch's import ran (side by side), and marks its end
    tool(
        bindir / "nvidia-smi",
        tmp_path / "torch-imported",
        "No devices were found",
        tail=f"touch {tmp_path / 'smi-done'}\nexit 6\n",
    )
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    args = {
        "venv": str(venv),
        "uv_bin": "",
        "torch_inner": probe_source("torch_inner"),
        "compile_inner": None,
        "smi_query": "index,name",
        "timeout": 60,
    }
    env = {
        **os.environ,
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "PYTHONPATH": str(site),
        "FLAGS": str(tmp_path),
    }
    doc = run_probe("verification", args, env)
    assert doc["smi"]["stdout"].strip() == "No devices were found"
    assert doc["torch"]["version"] == "2.11.0+cu130"
    assert doc["torch"]["available"] is True  # its first CUDA call came after nvidia-smi's end
