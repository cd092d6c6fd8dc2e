"""A process whose argv is not UTF-8 (a Latin-1 file name: `python3 -c ... caf\\xe9.txt`), in CT
200 and on the node holding a GPU: /proc/<pid>/cmdline is raw bytes, and the probes read it so.
A plain deploy still converges (the container's state is known, the node probe answers), and
verify.py names the node's GPU process with its argv (each byte that is not UTF-8 as ``\\xNN``).
One node, deployed once, is shared by the module."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import systemd_site
from tests.e2e.test_adopt import wait_for

PID_FILE = "/tmp/odd-argv.pid"
# sleeps, after writing its pid (the one its own /proc names it by) where the test reads it
SLEEPER = (
    "python3 -c 'import os, time; open(\"" + PID_FILE + '", "w").write(str(os.getpid())); '
    "time.sleep(600)' \"$(printf 'caf\\351.txt')\""  # printf's octal 351: the Latin-1 byte e9
)
DETACHED = f"rm -f {PID_FILE}; setsid nohup {SLEEPER} >/dev/null 2>&1 </dev/null &"


@pytest.fixture(scope="module")
def odd_site(wheelhouse, tmp_path_factory):
    with systemd_site(wheelhouse, tmp_path_factory.mktemp("odd-argv"), trainer=False) as site:
        first = site.deploy()
        assert first.rc == 0, first.output[-6000:]
        yield site


def started_pid(read) -> int:
    """The sleeper's pid, once it has written it (``read``: the pid file's text, or "")."""
    text = wait_for("the sleeper's pid", read, done=lambda t: t.strip().isdigit(), timeout=60)
    return int(text)


def test_a_containers_process_with_a_latin1_argv_leaves_its_state_known(odd_site):
    site = odd_site
    site.ct("sh", "-c", DETACHED)
    pid = started_pid(lambda: site.ct("cat", PID_FILE).stdout)
    try:
        # bytes in, bytes out: the argv holds the Latin-1 byte itself
        argv = site.node.ct_run(200, ["cat", f"/proc/{pid}/cmdline"], input=b"").stdout
        assert argv.split(b"\0")[-2] == b"caf\xe9.txt"
        run = site.deploy()
        assert run.rc == 0, run.output[-6000:]
        assert "pvegpu: 127.0.0.1: converged and verified" in run.output, run.output[-6000:]
        assert "state unknown" not in run.output and "could not be" not in run.output
        assert "Traceback" not in run.output, run.output[-6000:]
        assert site.ct("test", "-d", f"/proc/{pid}").returncode == 0  # left alone
    finally:
        site.ct("kill", "-9", str(pid))


def test_a_node_gpu_process_with_a_latin1_argv_is_named_by_verify(odd_site):
    site = odd_site
    node = site.node
    node.run(["sh", "-c", DETACHED], check=True)
    pid = started_pid(lambda: node.run(["cat", PID_FILE]).stdout)
    try:
        node.register_gpu_process(pid, 6, used_mib=20000)  # node GPU 6: a drafter GPU
        run = site.pyinfra("verify.py")
        assert run.rc != 0 and "Traceback" not in run.output, run.output[-6000:]
        assert (
            f'pid {pid} (python3 -c import os, time; open("{PID_FILE}", "w")'
            f".write(str(os.getpid())); time.sleep(600) caf\\xe9.txt) holding 20000 MiB on "
            "node GPU 6"
        ) in run.output, run.output[-6000:]
    finally:
        node.kill_gpu_process(pid)
