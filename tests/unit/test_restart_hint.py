"""The restart hint of a stopped training (pvegpu.plan.restart_hint) and what it is made from:
the node probe's part of each process's environment (probes/ct_processes.py ``kept_env``) and
the container view's transient units (probes/ct_view.py). A hint is checked by running it: its
command after ``pct exec <vmid> --`` goes to a real ``sh``."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from types import SimpleNamespace

from pvegpu.plan.restart_hint import RestartHint, hint_texts, restart_hint
from pvegpu.plan.running_training import HAND, Trainer
from tests.unit.test_ct_reads import probe_functions
from tests.unit.test_node_probe_processes import CT200, add, probe  # noqa: F401 (a fixture)

RECORDER = """\
import json, os, sys
with open(os.environ["OUT"], "w") as f:
    json.dump({"argv": sys.argv, "cwd": os.getcwd(), "python": sys.executable,
               "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}, f)
"""


def run_in_container(hint: str, out, vmid: int = 200) -> dict:
    """Run ``hint`` as the node would, with ``pct exec <vmid> --`` taken off (a real sh here),
    and -> what the started :data:`RECORDER` wrote to ``out``."""
    argv = shlex.split(hint)
    assert argv[:4] == ["pct", "exec", str(vmid), "--"], hint
    env = {"PATH": os.environ["PATH"], "OUT": str(out)}
    subprocess.run(argv[4:], check=True, timeout=30, env=env)
    for _ in range(300):  # started in the background (nohup ... &)
        if out.exists() and out.read_text():
            return json.loads(out.read_text())
        time.sleep(0.1)
    raise AssertionError(f"{hint} started nothing")


def test_kept_env_keeps_what_decides_where_a_training_runs_and_never_a_secret(
    probe,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    add(tmp_path, 7, cgroup=CT200, argv=["python", "t.py"])
    env = {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_DEBUG": "INFO",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_TOKEN": "s3cret",
        "WANDB_API_KEY": "k3y",
        "AWS_SECRET_ACCESS_KEY": "x",
        "HOME": "/root",
        "PATH": "/usr/bin",
    }
    raw = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
    (tmp_path / "proc" / "7" / "environ").write_bytes(raw)
    assert probe["kept_env"](7) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_DEBUG": "INFO",
        "TOKENIZERS_PARALLELISM": "false",
    }
    # an activated venv: `python` runs from its bin/, so PATH goes with VIRTUAL_ENV
    (tmp_path / "proc" / "7" / "environ").write_bytes(raw + b"VIRTUAL_ENV=/root/venv\0")
    assert probe["kept_env"](7)["PATH"] == "/usr/bin"
    (procs,) = [probe["container_processes"](200)]
    assert procs[0]["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_an_unreadable_environment_is_none_kept(probe, tmp_path):  # noqa: F811
    add(tmp_path, 8, cgroup=CT200, argv=["python", "t.py"])
    assert probe["kept_env"](8) == {}


def test_a_hand_started_hint_runs_it_as_it_ran_from_where_its_venv_is_now(tmp_path):
    """Its argv (an argument with a space), its directory, its GPUs, and its venv's python
    where the switch moved the venv made by hand."""
    aside = tmp_path / "venv.pre-pvegpu.7"
    (aside / "bin").mkdir(parents=True)
    (aside / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.py").write_text(RECORDER)
    out = tmp_path / "out.json"
    venv = str(tmp_path / "venv")
    procs = [
        {
            "pid": 5,
            "argv": [f"{venv}/bin/python", "t.py", "--note", "a b"],
            "cwd": str(tmp_path / "data"),
            "env": {"CUDA_VISIBLE_DEVICES": "2,3", "OMP_NUM_THREADS": "4"},
        }
    ]
    hint = restart_hint(200, Trainer(5, "python t.py", HAND), procs, None, None)
    run = SimpleNamespace(taken_over={"pve": [hint]}, venv_moved={("pve", 200): {venv: str(aside)}})
    (text,) = hint_texts(run, "pve")
    got = run_in_container(text, out)
    assert got["argv"] == ["t.py", "--note", "a b"]
    assert got["cwd"] == str(tmp_path / "data") and got["cuda"] == "2,3"
    assert got["python"] == f"{aside}/bin/python"


def run_with_fake_systemd(hint: str, tmp_path) -> list[list[str]]:
    """Run ``hint``'s command (``pct exec`` taken off) with stand-ins for systemctl and
    systemd-run on PATH that record their argv; -> the calls in order."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("systemctl", "systemd-run"):
        (bin_dir / tool).write_text(
            f"#!{sys.executable}\nimport json, sys\n"
            f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        )
        (bin_dir / tool).chmod(0o755)
    argv = shlex.split(hint)
    assert argv[:4] == ["pct", "exec", "200", "--"], hint
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(argv[4:], check=True, timeout=30, env=env)
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_transient_unit_is_reset_then_run_again_by_systemd_run_as_it_ran(tmp_path):
    procs = [{"pid": 5, "argv": ["/v/bin/python", "t.py", "a b"], "cwd": "/d", "env": {"A": "1"}}]
    t = Trainer(5, "python t.py", "train.service", unit="train.service")
    live = {"transient": [["train.service", None]]}
    calls = run_with_fake_systemd(restart_hint(200, t, procs, None, live).text(), tmp_path)
    # a failed transient unit stays loaded and systemd-run refuses its name until it is reset
    assert calls == [
        ["reset-failed", "train.service"],
        [
            "--unit=train.service",
            "--working-directory=/d",
            "--setenv=A=1",
            "--",
            "/v/bin/python",
            "t.py",
            "a b",
        ],
    ]


def test_a_unit_hint_goes_to_the_manager_that_ran_it():
    procs = [{"pid": 5, "argv": ["/v/bin/python", "t.py"], "cwd": "/d", "env": {"A": "1"}}]
    t = Trainer(5, "python t.py", "train.service", unit="train.service")
    live = {"transient": [["train.service", None]]}
    # a transient unit of the same name in the system's manager is not a user's
    assert restart_hint(200, t, procs, 0, live).text().endswith("enable --now train.service'")
    assert restart_hint(200, t, procs, None, {"transient": []}).text() == (
        "pct exec 200 -- systemctl enable --now train.service"
    )
    user = restart_hint(200, t, procs, 1000, {"transient": [["train.service", 1000]]}).text()
    assert "runuser" in user and "systemd-run --user --unit=train.service" in user


def test_the_view_reads_transient_units_of_the_system_and_of_each_user():
    p = probe_functions()
    view = p["parse_view"](
        [
            "transient /run/systemd/transient/train.service",
            "transient /run/user/1000/systemd/transient/run-u7.service",
            "transient /run/systemd/transient/../x",
            "end",
        ]
    )
    assert view["transient"] == [["train.service", None], ["run-u7.service", 1000]]


def test_the_switch_records_where_the_venv_went_under_the_key_the_hints_are_read_by():
    """The switch runs in the container's host, the takeover in the node's: a hint recorded by
    the node finds the move recorded by its container."""
    from pvegpu.operations.venv_moves import record_moved
    from pvegpu.run.run_context import run_context

    class State:  # pyinfra's State stands in: run_context keys on it
        pass

    state = State()
    ct_host = SimpleNamespace(name="@pct/127.0.0.1/200", data={"pct_vmid": 200})
    record_moved(state, ct_host, {"/root/venv": "/root/venv.pre-pvegpu.5"})
    run = run_context(state)
    run.taken_over["127.0.0.1"] = [RestartHint(200, "x", ("/root/venv/bin/python", "t.py"))]
    (text,) = hint_texts(run, "127.0.0.1")
    assert "/root/venv.pre-pvegpu.5/bin/python t.py" in text
