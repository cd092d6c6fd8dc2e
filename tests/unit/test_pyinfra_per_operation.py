"""pvegpu.startup.pyinfra_per_operation gives pyinfra's own answers, without its per-operation
stack walk and type-hint evaluation (issue 22)."""

from __future__ import annotations

import types

import pyinfra
import pytest
from pyinfra.api import arguments, facts, util

from pvegpu.startup import pyinfra_per_operation as fast
from pvegpu.startup.pyinfra_per_operation import operation  # the module, not the decorator

# A caller that lives in pyinfra's files, as solve_operation_consistency does: both walks start
# above it and skip it.
PYINFRA_CALLER = compile(
    "def ask(state):\n    return original(state), fast(state)\n",
    util.PYINFRA_INSTALL_DIR + "/api/pvegpu_test_caller.py",
    "exec",
)
# A deploy file that calls an operation from a task function, over several lines.
DEPLOY = """\
def task(state):
    x = 1
    return ask(
        state,
    )

result = task(state)
"""


def orders(tmp_path, deploy_filename, op_file_number=3):
    caller_scope = {
        "original": util.get_operation_order_from_stack,
        "fast": fast.operation_order,
    }
    exec(PYINFRA_CALLER, caller_scope)
    deploy = tmp_path / "deploy.py"
    deploy.write_text(DEPLOY)
    state = types.SimpleNamespace(
        current_deploy_filename=deploy_filename and str(deploy_filename),
        current_op_file_number=op_file_number,
    )
    scope = {"ask": caller_scope["ask"], "state": state}
    exec(compile(DEPLOY, str(deploy), "exec"), scope)  # as pyinfra's exec_file runs a deploy
    return scope["result"]


@pytest.mark.parametrize("is_cli", [True, False])
@pytest.mark.parametrize("which", ["deploy file", "no deploy file", "a file not on the stack"])
def test_operation_order_is_pyinfras(tmp_path, monkeypatch, is_cli, which):
    monkeypatch.setattr(pyinfra, "is_cli", is_cli)
    name = {
        "deploy file": tmp_path / "deploy.py",
        "no deploy file": None,
        "a file not on the stack": tmp_path / "other.py",
    }[which]
    original, ours = orders(tmp_path, name)
    assert ours == original
    if which == "deploy file":  # the deploy file's two lines: the task call, then the op call
        assert ours[-2:] == [7, 3] and ours[0] == (3 if is_cli else 7)


def test_global_arguments_are_pyinfras_and_a_new_list_each_time():
    ours = fast.global_arguments()
    assert ours == list(arguments.get_type_hints(arguments.AllArguments).items())
    ours.clear()
    assert fast.global_arguments() and fast.global_arguments() is not fast.global_arguments()


def test_install_puts_both_where_pyinfra_calls_them(monkeypatch):
    for module, name in [
        (operation, "get_operation_order_from_stack"),
        (arguments, "all_global_arguments"),
        (facts, "all_global_arguments"),
    ]:
        monkeypatch.setattr(module, name, getattr(module, name))  # restored after the test
    fast.install()
    assert operation.get_operation_order_from_stack is fast.operation_order
    assert arguments.all_global_arguments is fast.global_arguments
    assert facts.all_global_arguments is fast.global_arguments
