"""The @pct connector's command building, checked by running the exact node-side string through a
real shell with a `pct` stand-in that executes what follows `--` (as lxc-attach does)."""

import os
import shlex
import subprocess

import pytest
from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import InventoryError

from pvegpu.connectors.pct import (
    explain_pct_error,
    get_command,
    parse_pct_name,
    pct_exec_argv,
    put_command,
)
from tests.tricky_strings import TRICKY


@pytest.fixture
def fake_pct(tmp_path):
    script = tmp_path / "pct"
    script.write_text(
        '#!/bin/sh\n[ "$1" = exec ] || exit 99\nshift 2\n'
        '[ "$1" = -- ] || exit 98\nshift\nexec "$@"\n'
    )
    script.chmod(0o755)
    return tmp_path


def node_command(inner: str) -> str:
    parts = pct_exec_argv(200, "")[:-1]
    return StringCommand(*(QuoteString(p) for p in parts), QuoteString(inner)).get_raw_value()


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_strings_survive_node_shell_and_container_shell(fake_pct, text):
    inner = StringCommand("printf", "%s", QuoteString(text)).get_raw_value()
    env = {"PATH": f"{fake_pct}:/usr/bin:/bin", "LEAK": "1"}
    out = subprocess.run(["sh", "-c", node_command(inner)], env=env, capture_output=True)
    assert out.stdout.decode() == text


def test_clean_environment_and_exit_code_pass_through(fake_pct):
    env = {"PATH": f"{fake_pct}:/usr/bin:/bin", "LEAK": "1"}
    out = subprocess.run(
        ["sh", "-c", node_command('echo "${LEAK:-clean} $PATH"; exit 42')],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 42
    assert out.stdout.startswith("clean /usr/local/sbin:/usr/local/bin:")


def test_names_and_errors():
    assert parse_pct_name("127.0.0.1/200") == ("127.0.0.1", 200)
    for bad in ("127.0.0.1", "127.0.0.1/abc", "/200", "127.0.0.1/5"):
        with pytest.raises(InventoryError, match="use @pct/<node address>/<vmid>"):
            parse_pct_name(bad)
    assert "does not exist on node n1" in explain_pct_error(
        "n1", 200, "Configuration file 'nodes/pve1/lxc/200.conf' does not exist"
    )
    assert explain_pct_error("n1", 200, "sh: 1: foo: not found") is None


def node_shell(fake_pct, inner: str, data: bytes = b"", cwd=None):
    """Run what ``PctConnector._exec_bytes`` sends over SSH (the node's shell runs it)."""
    command = shlex.join(pct_exec_argv(200, inner))
    env = {"PATH": f"{fake_pct}:/usr/bin:/bin"}
    return subprocess.run(["sh", "-c", command], env=env, input=data, capture_output=True, cwd=cwd)


def test_put_to_a_hostile_name_creates_exactly_that_file_and_runs_nothing(fake_pct, tmp_path):
    box = tmp_path / "box"
    box.mkdir()
    dest = f"{box}/x$(touch INJ)y`touch INJ2`;touch INJ3"  # an injection would land in box
    assert node_shell(fake_pct, put_command(dest), b"payload", cwd=box).returncode == 0
    assert sorted(os.listdir(box)) == [os.path.basename(dest)]
    assert (box / os.path.basename(dest)).read_bytes() == b"payload"


@pytest.mark.parametrize("name", TRICKY + ["'", '"', "a'b\"c$d", "--", "*"])
def test_file_names_round_trip_through_put_and_get(fake_pct, tmp_path, name):
    box = tmp_path / "box"
    box.mkdir()
    data = name.encode() + b"\x00\xff" + bytes(range(256))
    # Relative to the working directory too, where a leading dash would read as an option.
    for dest, cwd in ((f"{box}/{name}", None), (name, box)):
        put = node_shell(fake_pct, put_command(dest), data, cwd=cwd)
        assert put.returncode == 0, put.stderr
        assert sorted(os.listdir(box)) == [name]
        got = node_shell(fake_pct, get_command(dest), cwd=cwd)
        assert got.returncode == 0 and got.stdout == data, got.stderr
        (box / name).unlink()
