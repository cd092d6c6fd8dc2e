"""A process whose argv is not UTF-8 (a Latin-1 file name): /proc/<pid>/cmdline is each argument's
raw bytes, so the probes read /proc as bytes and decode without failing (the prelude's
``as_text``: UTF-8, any other byte as ``\\xNN``). The node probe, as sent, lists such a GPU
process and prints valid JSON; the container probe counts a user of a venv whose mapped file's
name is not UTF-8; no probe text read raises on such a byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from pvegpu.plan.running_training import TRAINING, running_training
from pvegpu.probes import prelude
from pvegpu.probes import training_held as th
from tests.unit.test_probe_side_by_side import run_probe

NAME = b"caf\xe9.txt"  # "café.txt" as a Latin-1 file system names it
READ = "caf\\xe9.txt"  # how every probe reads it
SLEEP = "import sys, time; print('up', flush=True); time.sleep(60)"


@contextmanager
def process(*argv: str | bytes) -> Iterator[int]:
    """A live process with ``argv`` (bytes passed as they are): its pid; ended by pid on the way
    out, whatever the test did."""
    p = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert p.stdout is not None and p.stdout.readline() == b"up\n"
        yield p.pid
    finally:
        p.kill()
        p.wait(timeout=10)


def test_bytes_that_are_not_utf8_read_as_escapes_and_the_rest_as_it_is():
    assert prelude.as_text(NAME) == READ
    assert prelude.as_text("café".encode()) == "café"
    assert prelude.split_argv(b"python3\0" + NAME + b"\0\0") == ["python3", READ, ""]
    assert prelude.split_argv(b"") == []
    # no lone surrogate (os.fsdecode's): valid JSON that the controller can print as UTF-8
    assert json.loads(json.dumps(prelude.as_text(NAME))).encode("utf-8") == READ.encode()


def test_a_text_file_with_a_latin1_byte_is_read_not_raised(tmp_path):
    f = tmp_path / "stat"
    f.write_bytes(b"42 (" + NAME + b") S 1 42 42\n")
    assert prelude.read(str(f)) == f"42 ({READ}) S 1 42 42\n"
    assert prelude.read_bytes(str(f)) == b"42 (" + NAME + b") S 1 42 42\n"
    assert prelude.read(str(tmp_path / "gone")) is None
    assert prelude.read_bytes(str(tmp_path / "gone")) is None


def test_a_live_process_with_a_latin1_argument_has_its_argv_read():
    with process(sys.executable, "-c", SLEEP, NAME) as pid:
        assert prelude.proc_argv(pid) == [sys.executable, "-c", SLEEP, READ]
    assert prelude.proc_argv(pid) is None  # gone (reaped above)


def test_a_training_with_a_latin1_argument_is_still_recognised():
    """Each argument is decoded on its own: a Latin-1 byte in a later one leaves the python and
    the script, on which the node (controller) and the container (verification) recognise it."""
    argv = prelude.split_argv(b"/root/venv/bin/python\0/data/t.py\0--data\0" + NAME + b"\0")
    assert argv == ["/root/venv/bin/python", "/data/t.py", "--data", READ]
    session = "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope"
    ct = {
        "exists": True,
        "status": "running",
        "live": {"unit_active": "inactive", "units": []},
        "processes": [{"pid": 4242, "ppid": 1, "argv": argv, "cwd": "/", "cgroup": session}],
    }
    [t] = running_training(200, ct, {"compute_apps": []}, "t.service", {"script": "/data/t.py"})
    assert (t.kind, t.named) == (TRAINING, "pid 4242, started by hand")
    matcher = {"script": "/data/t.py", "pythons": ["/root/venv/bin/python"]}
    assert th.is_training_argv(argv, matcher)


FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=index,*) echo "0, NVIDIA H200, GPU-a, 143771, 00000000:18:00.0, 580.95.05" ;;
  --query-compute-apps=*) printf '%s, 1000, GPU-a, /opt/caf\\351/python\\n' {pid} ;;
  *) exit 2 ;;
esac
"""


def test_the_node_probe_lists_a_gpu_process_whose_argv_is_not_utf8(tmp_path):
    """As sent, under the node's python: the GPU process list and the scan for stray
    nvidia-persistenced daemons (every process's cmdline) read it; the JSON is valid."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    with process(sys.executable, "-c", SLEEP, NAME) as pid:
        smi = bindir / "nvidia-smi"
        smi.write_text(FAKE_SMI.format(pid=pid))
        smi.chmod(0o755)
        env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
        doc = run_probe("node_state", {"vmids": [], "data_dir": str(tmp_path)}, env)
    assert [(a["pid"], a["argv"], a["cmdline"], a["name"]) for a in doc["compute_apps"]] == [
        (
            pid,
            [sys.executable, "-c", SLEEP, READ],
            f"{sys.executable} -c {SLEEP} {READ}",
            "/opt/caf\\xe9/python",  # nvidia-smi's output is decoded the same way
        )
    ]
    assert doc["persistenced"]["outside_pids"] == []


def test_a_venv_user_that_maps_a_file_named_in_latin1_is_counted(tmp_path):
    """/proc/<pid>/maps names each mapped file by its raw bytes: the container probe reads it as
    bytes and meets the venv's path the way readlink names it."""
    build = tmp_path / "venvs" / "torch-2.11.0-cu130.b1"
    build.mkdir(parents=True)
    mapped = os.fsencode(build) + b"/" + NAME
    with open(mapped, "wb") as f:
        f.write(b"x" * 4096)
    holds = (
        "import mmap, sys, time; f = open(sys.argv[1], 'rb'); "
        "m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ); f.close(); "
        "print('up', flush=True); time.sleep(60)"
    )
    with process(sys.executable, "-c", holds, mapped) as pid:
        args = {"venvs_dir": str(tmp_path / "venvs"), "venv_path": str(tmp_path / "venv")}
        args["uv_bin"] = str(tmp_path / "no-uv")
        doc = run_probe("ct_state", args)
    assert doc["venvs"]["torch-2.11.0-cu130.b1"]["in_use"] == [pid]
