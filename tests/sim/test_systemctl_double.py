"""The systemctl double (the node's: the simulated node has no systemd as PID 1; containers boot
real systemd and use their own systemctl) does what systemd does synchronously at a start:
RuntimeDirectory=, then ExecStartPre= commands with the unit's environment, specifiers and
$-expansion; a failing one fails the start like systemd."""

import pytest

UNIT = r"""[Unit]
Description=t
[Service]
WorkingDirectory=/srv/work
Environment=GREETING=hello WHO="a b"
RuntimeDirectory=t-%N
# what the start ran with; %% and $$ reach the shell as % and $
ExecStartPre=-/bin/sh -c 'exec > /run/t-%N/started; \
    echo "$${GREETING} ${WHO} %n $$(date +%%Y | wc -c) $$PWD"'
ExecStartPre=/bin/true
ExecStart=/bin/sleep infinity
[Install]
WantedBy=multi-user.target
"""


@pytest.fixture(scope="module")
def ct(shared_sim_node):
    """The node (the fixture keeps its old name: every test below runs systemctl there)."""
    shared_sim_node.run(["mkdir", "-p", "/srv/work"], check=True)
    return shared_sim_node


def put_unit(node, text, name="t.service"):
    node.run(["sh", "-c", f"cat > /etc/systemd/system/{name}"], input=text, check=True)


def systemctl(node, *args):
    return node.run(["systemctl", *args])


def test_start_runs_exec_start_pre_in_the_runtime_directory_and_stop_removes_it(ct):
    put_unit(ct, UNIT)
    assert systemctl(ct, "start", "t").returncode == 0
    started = ct.run(["cat", "/run/t-t/started"]).stdout
    assert started == "hello a b t.service 5 /srv/work\n"
    assert systemctl(ct, "is-active", "t").stdout == "active\n"
    assert systemctl(ct, "stop", "t").returncode == 0
    assert ct.run(["test", "-e", "/run/t-t"]).returncode == 1


def test_a_failing_exec_start_pre_fails_the_start_like_systemd(ct):
    put_unit(ct, UNIT.replace("ExecStartPre=/bin/true", "ExecStartPre=/bin/false"), "f.service")
    r = systemctl(ct, "start", "f")
    assert r.returncode == 1
    assert r.stderr == (
        "Job for f.service failed because the control process exited with error code.\n"
        'See "systemctl status f.service" and "journalctl -xeu f.service" for details.\n'
    )
    assert (systemctl(ct, "is-active", "f").stdout, systemctl(ct, "is-failed", "f").returncode) == (
        "failed\n",
        0,
    )
    assert (
        systemctl(ct, "show", "-p", "ActiveState,Result", "f").stdout
        == "ActiveState=failed\nResult=exit-code\n"
    )
    assert ct.run(["test", "-e", "/run/t-f"]).returncode == 1  # removed with the failed start
    assert systemctl(ct, "reset-failed", "f").returncode == 0
    assert systemctl(ct, "is-active", "f").stdout == "inactive\n"


def test_a_missing_working_directory_fails_the_start(ct):
    put_unit(ct, UNIT.replace("/srv/work", "/srv/missing"), "w.service")
    assert systemctl(ct, "start", "w").returncode == 1
    put_unit(ct, UNIT.replace("=/srv/work", "=-/srv/missing"), "w.service")
    assert systemctl(ct, "start", "w").returncode == 0
