"""Progress lines of long steps (pvegpu.operations.progress): a line arrives while the command
runs, not after it; a step that ends at once costs no extra round trip; the command's status,
output and exceptions stay its own. The fake host's command ends only once a line has arrived
(or a bound passed), so "while it runs" is checked without timing thresholds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from gevent.event import Event
from pyinfra.connectors.util import CommandOutput, OutputLine

from pvegpu.operations.progress import (
    Progress,
    run_with_progress,
    unit_stop_progress,
    waiting_for,
    with_progress,
)
from pvegpu.operations.training import stop_and_wait_command
from pvegpu.settings import Settings, defaults

STATE = SimpleNamespace(print_output=False, print_input=False)


class Host:
    """Runs the step until ``release`` is set (by the first progress line when ``hold``)."""

    name = print_prefix = "ct"

    def __init__(self, hold=True, status=True, poll_says="3 of 9", fails=None):
        self.hold, self.status, self.poll_says, self.fails = hold, status, poll_says, fails
        self.release = Event()
        self.lines: list[str] = []
        self.commands: list[str] = []
        self.running = False

    def run_shell_command(self, command, print_output=False, print_input=False):
        self.commands.append(str(command))
        if str(command).startswith("poll"):
            return True, CommandOutput([OutputLine("stdout", self.poll_says)])
        self.running = True
        if self.hold:
            self.release.wait(timeout=60)  # a bound, not a threshold: the test fails without it
        self.running = False
        if self.fails:
            raise self.fails
        return self.status, CommandOutput([OutputLine("stderr", "the step's own words")])

    def log_styled(self, message, **kwargs):
        self.lines.append((message, self.running))
        self.release.set()


def test_a_line_arrives_while_the_step_runs():
    host = Host()
    status, output = run_with_progress(
        STATE, host, "step", Progress("building b.next", 0.01, poll="poll")
    )
    assert status is True and output.stderr == "the step's own words"
    assert host.lines == [("building b.next: 0 s so far; 3 of 9", True)]
    assert host.commands == ["step", "poll"]


def test_a_step_that_ends_at_once_says_nothing_and_polls_nothing():
    host = Host(hold=False)
    assert run_with_progress(STATE, host, "step", Progress("x", 3600, poll="poll"))[0] is True
    assert host.lines == [] and host.commands == ["step"]


def test_a_failed_step_fails_with_its_own_output(caplog):
    host = Host(status=False)
    assert with_progress("step", waiting_for("x", 0.01)).execute(STATE, host, {}) is False
    assert host.lines == [("waiting for x: 0 s so far", True)]
    assert "the step's own words" in caplog.text  # as pyinfra prints a failed command's output


def test_a_connection_error_is_the_steps_failure():
    host = Host(hold=False, fails=OSError("connection lost"))
    with pytest.raises(OSError):
        run_with_progress(STATE, host, "step", Progress("x", 0.01))
    assert with_progress("step", Progress("x", 0.01)).execute(STATE, host, {}) is False


def test_the_stop_says_how_long_it_waited_and_its_timeout_from_systemd():
    settings = Settings.from_data({**defaults(), "progress_interval_s": 7})
    command = stop_and_wait_command(settings)
    assert str(command).startswith("systemctl stop dflash-train.service && ")
    assert command.progress == unit_stop_progress("dflash-train.service", 7)
    host = Host()

    def show(cmd, **kw):  # systemctl show prints one property a line
        if str(cmd).startswith("systemctl show"):
            return True, CommandOutput(
                [
                    OutputLine("stdout", "SubState=stop-sigterm"),
                    OutputLine("stdout", "TimeoutStopUSec=15min"),
                ]
            )
        return Host.run_shell_command(host, cmd, **kw)

    host.run_shell_command = show
    progress = unit_stop_progress("dflash-train.service", 0.01)
    assert run_with_progress(STATE, host, "stop", progress)[0] is True
    assert host.lines == [
        (
            "waiting for dflash-train.service to stop (a training writes its checkpoint): 0 s so "
            "far; stop-sigterm, SIGKILL after TimeoutStopSec=15min",
            True,
        )
    ]


def test_the_container_waits_and_the_installer_say_how_long_they_run():
    from pvegpu.operations import proxmox

    wait = proxmox.wait_exec(200, 3)
    assert str(wait).startswith("i=0; until pct exec 200 -- true")
    assert wait.progress == waiting_for("`pct exec` to answer in CT 200", 3, "about 60 s")


def test_the_build_poll_reads_what_uvs_cache_received_and_the_packages_installed(tmp_path):
    import subprocess

    from pvegpu.plan.venv_build import CACHE_START, build_progress_detail, build_progress_poll

    s = Settings.from_data(
        {
            **defaults(),
            "venvs_dir": str(tmp_path / "venvs"),
            "uv_cache_dir": str(tmp_path / "cache"),
        }
    )
    poll = build_progress_poll(s)
    detail = build_progress_detail(3)
    building = tmp_path / "venvs" / f"{s.torch.build_name}.building"
    assert subprocess.run(["sh", "-c", poll], capture_output=True, text=True).stdout == ""
    (tmp_path / "cache").mkdir()
    (building / ".pvegpu-sync").mkdir(parents=True)
    start = subprocess.run(["du", "-sk", str(tmp_path / "cache")], capture_output=True, text=True)
    (building / CACHE_START).write_text(start.stdout.split()[0] + "\n")
    (tmp_path / "cache" / "torch.part").write_bytes(b"\1" * (4 << 20))  # 4 MiB arrived

    def now():
        out = subprocess.run(["sh", "-c", poll], capture_output=True, text=True).stdout
        return detail(out.splitlines())

    assert now().startswith("download: 4.0 MiB into uv's cache so far, 0 of 3 packages"), now()
    (building / "lib/python3.11/site-packages/filelock-3.20.0.dist-info").mkdir(parents=True)
    assert now().startswith("install: 1 of 3 packages installed (4.0 MiB"), now()
