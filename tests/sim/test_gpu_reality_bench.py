"""bench/gpu_reality.py keeps working: it runs on a simulated node as on a GPU machine (the node's
python3 without pyinfra, the nvidia-smi double, /proc and /dev of the simulated driver, the torch
double on PYTHONPATH), says "not a real GPU", exits 0 and writes its report (the torchrun checks
run against the double's launcher); without any GPU it says so and exits 0 too."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.fixtures import _factory

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "gpu_reality.py"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    make, finish = _factory(tmp_path_factory)
    try:
        yield make(gpus=2, ct_init="exec")
    finally:
        finish()


def test_the_bench_runs_against_the_simulator_and_reports(node, wheelhouse):
    wheel = Path(wheelhouse.torch["cu130"]).read_bytes()
    node.run(
        ["sh", "-c", "base64 -d > /root/torch.whl"],
        input=base64.b64encode(wheel).decode(),
        check=True,
    )
    # the bench and the package it runs, copied in: the node sees the host's files, but not a
    # checkout under a /tmp of its own (CI may clone the repo there)
    tar = subprocess.run(
        ["tar", "-C", str(ROOT), "-czf", "-", "bench", "src/pvegpu"],
        capture_output=True,
        check=True,
    ).stdout
    node.run(
        ["sh", "-c", "mkdir -p /root/repo && base64 -d | tar -C /root/repo -xzf -"],
        input=base64.b64encode(tar).decode(),
        check=True,
    )
    node.torch_config(register_contexts=True)  # a context lists as a compute process
    try:
        run = node.run(
            [
                "python3",
                "/root/repo/bench/gpu_reality.py",
                "--out",
                "/root/gr",
                "--env",
                "PYTHONPATH=/root/torch.whl",
                "--env",
                "PYTHONDONTWRITEBYTECODE=1",
            ],
            env={"PYTHONDONTWRITEBYTECODE": "1"},
            timeout=300,
        )
    finally:
        node.torch_config()
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("not a real GPU: the simulator's doubles answer"), run.stdout
    report = json.loads(node.read("/root/gr/report.json"))
    assert (report["simulated"], report["real_gpu"]) == (True, False)
    steps = report["steps"]
    assert not [n for n, s in steps.items() if isinstance(s, dict) and s.get("error")], steps
    checks = {c["name"]: c for c in report["checks"]}
    assert not [n for n, c in checks.items() if c["ok"] is False], report["checks"]
    # the no-context path makes none; the context path's size is the double's context_mib
    assert checks["no-context path"]["ok"] is True
    sizes = steps["contexts"]["context"]["sizes"]
    assert [s["apps_used_mib"] for s in sizes] == [500, 500]
    assert checks["held GPU"]["ok"] is True
    assert steps["compile"]["cold"]["ok"] and steps["compile"]["warm"]["ok"]
    assert steps["node"]["driver_version"] == node.cfg["driver_version"]
    assert "| device counts |" in node.read("/root/gr/report.md")
    assert node.run(["test", "-s", "/root/gr/raw/nvidia-smi-help-query-gpu.txt"]).returncode == 0
    # torchrun's checks against the double's launcher (torch 2.11: --signals-to-handle, no
    # --shutdown-timeout); its torch has no DataLoader and no process group
    opts = steps["torchrun_options"]
    assert (opts["double"], opts["help_rc"], checks["torchrun options"]["ok"]) == (True, 0, True)
    assert "--signals-to-handle" in opts["help"] and "--shutdown-timeout" not in opts["help"]
    assert steps["dataloader"]["skipped"].startswith("no real torch")
    assert checks["SIGTERM to the trainer alone"]["ok"] is None
    # the held launcher's machinery: the worker, SIGTERMed while torchrun is stopped, exits 0 as
    # a zombie of it; torchrun, SIGTERMed and let go, exits 1; nothing is left behind
    for run in steps["nccl_held"].values():
        assert (run["exit_status"], run["launcher_rc"]) == ("exit 0", 1), run
        assert run["worker"]["process_group"] is False
    assert checks["NCCL worker, launcher held"]["ok"] is None
    # (the pattern does not match this grep's own command line)
    left = node.run(["sh", "-c", "grep -l 'held_worke[r]' /proc/[0-9]*/cmdline"], check=False)
    assert left.stdout == "", left.stdout
    assert "| NCCL worker, launcher held |" in node.read("/root/gr/report.md")


def test_without_a_gpu_it_says_so_and_exits_0(tmp_path):
    run = subprocess.run(
        [sys.executable, str(BENCH), "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        env={"PATH": "/nonexistent"},
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("not a real GPU: nvidia-smi -L says")
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["real_gpu"] is False
    # the torchrun checks need no GPU, but a torch: none here (no python3 on PATH)
    steps = report["steps"]
    assert steps["torchrun_options"]["error"].startswith("exit 127")
    assert steps["dataloader"]["skipped"].startswith("no real torch: exit 127")
    assert steps["nccl_held"]["skipped"].startswith("no GPU")
    assert [c["ok"] for c in report["checks"]] == [None] * 5
