"""The @pct connector's command building, checked by running the exact node-side string through a
real shell with a `pct` stand-in that executes what follows `--` (as lxc-attach does)."""

import os
import subprocess

import pytest
from pyinfra.api import QuoteString, StringCommand

from pvegpu.connectors.pct import explain_pct_error, parse_pct_name, pct_exec_argv
from pyinfra.api.exceptions import InventoryError
from tests.tricky_strings import TRICKY



@pytest.fixture
def fake_pct(tmp_path):
    script = tmp_path / "pct"
    script.write_text('#!/bin/sh\n[ "$1" = exec ] || exit 99\nshift 2\n[ "$1" = -- ] || exit 98\nshift\nexec "$@"\n')
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
    out = subprocess.run(["sh", "-c", node_command('echo "${LEAK:-clean} $PATH"; exit 42')],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 42
    assert out.stdout.startswith("clean /usr/local/sbin:/usr/local/bin:")


def test_names_and_errors():
    assert parse_pct_name("127.0.0.1/200") == ("127.0.0.1", 200)
    for bad in ("127.0.0.1", "127.0.0.1/abc", "/200", "127.0.0.1/5"):
        with pytest.raises(InventoryError, match="use @pct/<node address>/<vmid>"):
            parse_pct_name(bad)
    assert "does not exist on node n1" in explain_pct_error(
        "n1", 200, "Configuration file 'nodes/pve1/lxc/200.conf' does not exist")
    assert explain_pct_error("n1", 200, "sh: 1: foo: not found") is None
