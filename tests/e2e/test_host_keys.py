"""Host keys (issue 11 item 7): a node's key pinned in a known_hosts file is checked strictly;
without one, the first key is recorded once, however many connections the run opens to the node."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sim.__main__ import site_env

ROOT = Path(__file__).resolve().parents[2]


def connect_only(site, tmp_path, **env_changes) -> subprocess.CompletedProcess:
    """Run pyinfra against the fleet with a deploy file that does nothing: only the connections
    (the node's and the container host's own) happen."""
    noop = tmp_path / "noop.py"
    noop.write_text("# connects, changes nothing\n")
    env = site_env(site.node)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", "inventory.py", str(noop)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def test_pinned_host_key_is_strict_and_a_first_key_is_recorded_once(site, tmp_path):
    node = site.node
    entry = f"[127.0.0.1]:{node.port}"
    pinned = Path(node.known_hosts_path).read_text()
    assert connect_only(site, tmp_path).returncode == 0  # the right pinned key

    # A wrong pinned key refuses the connection with a clear line.
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True
    )
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(
        f"{entry} {(tmp_path / 'other.pub').read_text().split()[0]} "
        f"{(tmp_path / 'other.pub').read_text().split()[1]}\n"
    )
    run = connect_only(site, tmp_path, PVE_SSH_KNOWN_HOSTS=str(wrong))
    assert run.returncode != 0
    assert "Host key for 127.0.0.1 does not match" in run.stdout + run.stderr

    # A pinned file without the node's key refuses too, and records nothing (strict).
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    run = connect_only(site, tmp_path, PVE_SSH_KNOWN_HOSTS=str(empty))
    assert run.returncode != 0
    assert f"No host key for {entry} found" in run.stdout + run.stderr
    assert empty.read_text() == ""

    # A pinned file that does not exist: one line before anything connects.
    run = connect_only(site, tmp_path, PVE_SSH_KNOWN_HOSTS=str(tmp_path / "missing"))
    assert run.returncode != 0
    assert f"PVE_SSH_KNOWN_HOSTS={tmp_path / 'missing'} is not a readable file" in run.stderr
    assert "Traceback" not in run.stdout + run.stderr

    # None given: the first key is recorded once in ~/.ssh/known_hosts, by two runs of two
    # connections each (the node, and the container host's own).
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    for _ in range(2):
        run = connect_only(site, tmp_path, PVE_SSH_KNOWN_HOSTS=None, HOME=str(home))
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    lines = (home / ".ssh" / "known_hosts").read_text().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].split()[2] == pinned.split()[2]
    assert os.stat(home / ".ssh" / "known_hosts").st_size > 0
