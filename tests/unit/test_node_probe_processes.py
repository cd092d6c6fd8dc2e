"""The node probe's list of a container's processes (probes/node_state.py: container_processes,
proc_fields), which the takeover signals by: pid, ppid, process group, session, state, start time,
the pid in the container, cgroup and cwd, read from a fake /proc in tmp_path (issue 35)."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from tests.unit.test_ct_reads import probe_functions

CT200 = "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope"


def stat_line(pid: int, name: str, state: str, ppid: int, pgid: int, sid: int, start: int) -> str:
    """A /proc/<pid>/stat line (proc(5)): every field after the name a different number, so a
    field read from the wrong place shows."""
    rest: list = [900 + k for k in range(3, 53)]  # fields 3-52; field k at k - 3
    rest[0:4] = [state, ppid, pgid, sid]  # fields 3-6
    rest[22 - 3] = start  # field 22: starttime
    return f"{pid} ({name}) " + " ".join(str(x) for x in rest) + "\n"


def add(root, pid, *, cgroup, argv, cwd="/data/dflash", nspid=None, **stat):
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    fields = {"name": "python", "state": "S", "ppid": 1, "pgid": pid, "sid": pid, "start": 5000}
    (d / "stat").write_text(stat_line(pid, **{**fields, **stat}))
    (d / "status").write_text(f"Name:\tx\nNSpid:\t{pid}\t{nspid or pid}\n")
    (d / "cgroup").write_text(cgroup + "\n")
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    os.symlink(cwd, d / "cwd")


@pytest.fixture
def probe(tmp_path):
    """The node probe's functions reading ``tmp_path/proc`` for ``/proc``."""
    p = probe_functions()
    real_read, real_read_bytes = p["read"], p["read_bytes"]

    def moved(path: str) -> str:
        return str(tmp_path) + path if path.startswith("/proc") else path

    p["read"] = lambda path: real_read(moved(path))
    p["read_bytes"] = lambda path: real_read_bytes(moved(path))
    p["os"] = SimpleNamespace(
        listdir=lambda path: os.listdir(moved(path)),
        readlink=lambda path: os.readlink(moved(path)),
        fsencode=os.fsencode,
        path=os.path,
    )
    (tmp_path / "proc").mkdir()
    return p


def test_proc_fields_come_from_their_places_after_a_name_with_spaces_and_parens(probe, tmp_path):
    add(
        tmp_path,
        4242,
        cgroup=CT200,
        argv=["python"],
        name="pt (data) 1",
        state="T",
        ppid=4200,
        pgid=4201,
        sid=4199,
        start=123456,
        nspid=77,
    )
    assert probe["proc_fields"]("4242") == {
        "state": "T",  # paused with ctrl-Z: the takeover continues it before SIGTERM
        "ppid": 4200,
        "pgid": 4201,
        "sid": 4199,
        "start": 123456,
        "ct_pid": 77,
    }


@pytest.mark.parametrize("state", ["Z", "X"])
def test_a_zombie_or_dead_process_has_no_fields(probe, tmp_path, state):
    add(tmp_path, 9, cgroup=CT200, argv=[], state=state)
    assert probe["proc_fields"]("9") is None
    assert probe["proc_fields"]("10") is None  # gone


def test_container_processes_are_this_containers_only_with_argv_cwd_and_cgroup(probe, tmp_path):
    add(tmp_path, 300, cgroup=CT200, argv=["/root/venv/bin/python", "-u", "train.py"], ppid=299)
    add(tmp_path, 301, cgroup="0::/lxc.payload.200/system.slice/t.service", argv=["torchrun"])
    add(tmp_path, 310, cgroup="0::/lxc/20/ns/init.scope", argv=["python", "t.py"])  # CT 20's
    add(tmp_path, 311, cgroup="0::/lxc/2001/ns/init.scope", argv=["python", "t.py"])  # CT 2001's
    add(tmp_path, 312, cgroup="0::/lxc.monitor/200", argv=["[lxc monitor] /var/lib/lxc 200"])
    # lxc's monitor on a hybrid (v1 + v2) host: one hierarchy names the container's cgroup too
    add(tmp_path, 315, cgroup="12:pids:/lxc/200\n0::/lxc.monitor/200", argv=["[lxc monitor] 200"])
    add(tmp_path, 313, cgroup="0::/system.slice/pvedaemon.service", argv=["pvedaemon"])
    add(tmp_path, 314, cgroup=CT200, argv=["python"], state="Z")  # exiting: left out
    found = {p["pid"]: p for p in probe["container_processes"](200)}
    assert sorted(found) == [300, 301]
    p = found[300]
    assert (p["argv"], p["cwd"], p["cgroup"]) == (
        ["/root/venv/bin/python", "-u", "train.py"],
        "/data/dflash",
        CT200,
    )
    assert (p["ppid"], p["pgid"], p["sid"], p["start"], p["state"]) == (299, 300, 300, 5000, "S")


def test_another_containers_read_does_not_list_these(probe, tmp_path):
    add(tmp_path, 300, cgroup=CT200, argv=["python", "t.py"])
    assert probe["container_processes"](20) == []
    assert probe["container_processes"](2) == []


def test_a_process_whose_argv_cwd_and_name_are_not_utf8_is_listed(probe, tmp_path):
    """A Latin-1 file name in its argv, its working directory and its program's name (comm, in
    stat and status): listed with each such byte as ``\\xNN``, never a scan that fails (the
    container's state would be unknown for as long as the process lives)."""
    add(tmp_path, 300, cgroup=CT200, argv=["python3"], ppid=299)
    d = tmp_path / "proc" / "300"
    (d / "cmdline").write_bytes(b"python3\0-c\0import time\0caf\xe9.txt\0")
    (d / "stat").write_bytes((d / "stat").read_bytes().replace(b"(python)", b"(caf\xe9)"))
    (d / "status").write_bytes(b"Name:\tcaf\xe9\nNSpid:\t300\t7\n")
    os.remove(d / "cwd")
    os.symlink(b"/data/caf\xe9", os.fsencode(d / "cwd"))
    processes, error = probe["container_processes_or_error"](200)
    assert error is None
    [p] = processes
    assert (p["pid"], p["ppid"], p["ct_pid"], p["argv"], p["cwd"]) == (
        300,
        299,
        7,
        ["python3", "-c", "import time", "caf\\xe9.txt"],
        "/data/caf\\xe9",
    )
    json.dumps(p).encode("utf-8")  # what the probe prints, and the controller can print
