"""A change made by the read right before it (pvegpu.run.gated, probes/ct_gate.py): the container's
exec waits at its gate after the view; the node probe runs the gates' own check on its read and
says go only when no training runs there that the change waits for. Fail closed: a training, a
check that fails, a view not read, or no word at all (the probe ended), and nothing changes."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from pvegpu.facts.probe import probe_source
from pvegpu.plan.running_training import others, running_in_read
from pvegpu.run.gated import check_bundle
from tests.unit.test_ct_reads import fake_pct

__all__ = ["fake_pct"]  # the fixture, used by name

UNIT = "dflash-train.service"
SCRIPT = ["/root/venv/bin/python", "/data/dflash/train.py"]
MATCH = {"script": "/data/dflash/train.py", "module": None, "workdir": "/data/dflash", "paths": []}
LIVE = {"unit_active": "inactive", "units": [], "other_units": {}}


def probe_functions():
    """The node probe's functions, classes and constants, without running the probe."""
    tree = ast.parse(probe_source("node_state"))
    keep = [
        n
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))
        or isinstance(n, ast.Assign)
        and all(isinstance(t, ast.Name) and t.id.isupper() and t.id != "A" for t in n.targets)
        or isinstance(n, ast.AnnAssign)
        and n.target.id.isupper()
    ]
    ns = {"A": {"installer_tools": ["ldconfig"]}, "_CHECK": {}}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "node_state", "exec"), ns)
    ns["_CHECK"].clear()
    return ns


@pytest.fixture(autouse=True)
def own_modules():
    """The node's check loads its modules under pvegpu's names (sys.modules, as on a node):
    this interpreter gets its own back after each test."""
    ours = lambda name: name == "pvegpu" or name.startswith("pvegpu.")  # noqa: E731
    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    yield
    for name in [k for k in sys.modules if ours(k) and k not in saved]:
        del sys.modules[name]
    sys.modules.update(saved)


def doc_with(processes) -> dict:
    ct = {"exists": True, "status": "running", "live": LIVE, "processes": processes}
    return {"gpus": [], "compute_apps": [], "containers": {"200": ct}}


HAND = {
    "pid": 4242,
    "ppid": 1,
    "pgid": 4242,
    "argv": SCRIPT,
    "cwd": "/",
    "cgroup": "0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope",
}


def gated_run(p, tmp_path, doc, bundle=None, reads=()):
    """Start a gated exec whose change makes a file, read its view, check ``doc``, answer: ->
    (the change's outcome, whether the file is there)."""
    made = tmp_path / "made"
    gated = p["start_view"](200, "u.service", list(reads), change=f"echo out; touch {made}")
    status, view, done = p["container_view"](gated)
    assert status == "running" and view is not None
    doc["containers"]["200"]["live"] = view | LIVE
    spec = {"line": "", "unit": UNIT, "match": MATCH}
    p["run_gated"](doc, {200: gated}, {"200": spec}, check_bundle() if bundle is None else bundle)
    return doc["containers"]["200"]["change"], made.exists(), done


def test_a_clear_check_makes_the_change_in_the_reads_exec(fake_pct, tmp_path):
    p = probe_functions()
    change, made, done = gated_run(p, tmp_path, doc_with([]), reads=["printf r"])
    assert made and done == [{"rc": 0, "stdout": ["r"]}]  # the folded reads come back as before
    assert change == {
        "ran": True,
        "rc": 0,
        "output": ["out"],
        "errors": [],
        "clear": True,
        "check_error": None,
    }


def test_a_training_started_by_hand_stops_the_change(fake_pct, tmp_path):
    p = probe_functions()
    change, made, _ = gated_run(p, tmp_path, doc_with([HAND]))
    assert not made and change["ran"] is False and change["clear"] is False


def test_a_check_that_cannot_run_changes_nothing(fake_pct, tmp_path):
    p = probe_functions()
    broken = {**check_bundle(), "modules": [["pvegpu.plan.running_training", "raise OSError(5)"]]}
    change, made, _ = gated_run(p, tmp_path, doc_with([]), bundle=broken)
    assert not made and change["ran"] is False and "OSError" in change["check_error"]


def test_a_container_whose_view_was_not_read_changes_nothing(fake_pct, tmp_path):
    # its exec reached the gate, but the node read holds no view of it (nothing to check on)
    p = probe_functions()
    made = tmp_path / "made"
    gated = p["start_view"](200, "u.service", [], change=f"touch {made}")
    p["container_view"](gated)
    doc = doc_with([])
    doc["containers"]["200"]["live"] = None
    p["run_gated"](doc, {200: gated}, {"200": {"line": "", "unit": UNIT}}, check_bundle())
    change = doc["containers"]["200"]["change"]
    assert not made.exists() and change["ran"] is False and change["clear"] is False


def test_no_word_from_the_probe_changes_nothing(fake_pct, tmp_path):
    # the probe ended (killed, timed out) before it said go: the exec's stdin ends
    p = probe_functions()
    made = tmp_path / "made"
    gated = p["start_view"](200, "u.service", [], change=f"touch {made}")
    assert p["container_view"](gated)[0] == "running"
    gated.proc.stdin.close()
    gated.proc.wait(10)
    assert not made.exists() and gated.answer(True)["ran"] is False


def test_a_failed_change_says_its_status_and_output(fake_pct, tmp_path):
    p = probe_functions()
    gated = p["start_view"](200, "u.service", [], change="echo nope >&2; exit 3")
    p["container_view"](gated)
    assert gated.answer(True) == {"ran": True, "rc": 3, "output": [], "errors": ["nope"]}


def test_the_view_never_reads_the_word_meant_for_the_gate(fake_pct, tmp_path):
    # a command of the view or of a read that reads stdin gets nothing (</dev/null), so the
    # word arrives at the gate whatever the view runs
    p = probe_functions()
    made = tmp_path / "made"
    gated = p["start_view"](200, "u.service", ["cat; echo read"], change=f"touch {made}")
    status, _, done = p["container_view"](gated)
    assert status == "running" and done == [{"rc": 0, "stdout": ["read"]}]
    assert gated.answer(True)["ran"] and made.exists()


@pytest.mark.parametrize(
    "processes",
    [[], [HAND], [{**HAND, "cgroup": "0::/lxc/200/ns/system.slice/cron.service"}]],
    ids=["none", "by-hand", "under-cron"],
)
def test_the_node_runs_the_gates_own_check(processes):
    # the bundle, loaded in an interpreter without pvegpu (as on a node), answers as the
    # controller's own check on the same read
    doc = doc_with(processes)
    code = (
        "import json, sys\n"
        + loader_source()
        + "\nbundle, doc, match = json.loads(sys.stdin.read())\n"
        "m = check_module(bundle)\n"
        "found = m.others(m.running_in_read(200, doc, 'dflash-train.service', match))\n"
        "print(json.dumps([t.named for t in found]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        input=json.dumps([check_bundle(), doc, MATCH]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) == [t.named for t in others(running_in_read(200, doc, UNIT, MATCH))]


def loader_source() -> str:
    """ct_gate.py's loader (its imports and ``check_module``) as the node probe sends it."""
    from importlib import resources

    text = resources.files("pvegpu.probes").joinpath("ct_gate.py").read_text()
    tree = ast.parse(text)
    keep = [
        n
        for n in tree.body
        if isinstance(n, ast.Import)
        or isinstance(n, ast.FunctionDef)
        and n.name == "check_module"
        or isinstance(n, ast.AnnAssign)
        and isinstance(n.target, ast.Name)
        and n.target.id == "_CHECK"
    ]
    return "\n" + ast.unparse(ast.Module(body=keep, type_ignores=[])) + "\n"


def test_the_bundle_holds_every_module_the_check_imports():
    bundle = check_bundle()
    sent = {name for name, _ in bundle["modules"]} | set(bundle["stubs"])
    for name, source in bundle["modules"]:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = f"pvegpu.plan.{node.module}"
                assert target in sent, (name, target)
                if target in bundle["stubs"]:
                    assert {a.name for a in node.names} <= set(bundle["stubs"][target]), name
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
                names = (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                )
                for mod in names:
                    top = mod.split(".")[0]
                    assert top == "__future__" or top in sys.stdlib_module_names, (name, mod)


# --- the venv switch's side (operations/training.py, operations/training_gate.py) ---------------


def gated_switch(monkeypatch, trainers, made):
    """live_build_and_unit's commands when its gate's read returns ``trainers`` and ``made``
    (the change's outcome on the node): -> (commands, waits, failures, remembered)."""
    from pvegpu.operations import training
    from tests.unit.test_running_training import gate, settings_with

    waits = gate(monkeypatch, training, [])
    asked, failed, remembered = [], [], []
    monkeypatch.setattr(
        training, "change_when_clear", lambda host, cmd, unit: asked.append(cmd) or (trainers, made)
    )
    monkeypatch.setattr(training, "failure", lambda *lines: failed.append(lines) or iter(()))
    monkeypatch.setattr(training, "mark_container_only", lambda host: None)
    monkeypatch.setattr(training, "remember", lambda update: remembered.append(update))
    s = settings_with()
    build = s.torch.build_name
    state = {"venvs": {build: {"link": f"{build}.b1", "real": f"{build}.b1"}}, "unit_digest": "x"}
    monkeypatch.setattr(training, "container_state", lambda: state)
    commands = list(training.live_build_and_unit._inner(settings=s))
    assert len(asked) == 1 and "/root/venv.pvegpu-tmp" in asked[0]  # the whole change is sent
    return commands, waits, failed, remembered


def test_a_switch_the_read_made_is_one_change_and_no_command_of_its_own(monkeypatch):
    from pyinfra.api import FunctionCommand

    made = {"ran": True, "rc": 0, "output": [], "clear": True, "check_error": None}
    commands, waits, failed, remembered = gated_switch(monkeypatch, [], made)
    assert waits == [] and failed == [] and len(remembered) == 1
    assert len(commands) == 1 and isinstance(commands[0], FunctionCommand)
    assert commands[0].execute(None, SimpleHost(), {}) is True


class SimpleHost:
    name = "ct200"


def test_a_switch_the_node_refused_for_a_training_waits(monkeypatch):
    from tests.unit.test_running_training import HAND_RUN

    made = {"ran": False, "rc": None, "output": [], "clear": False, "check_error": None}
    commands, waits, failed, _ = gated_switch(monkeypatch, [HAND_RUN], made)
    assert [w[0] for w in waits] == ["the switch of /root/venv to torch-2.11.0-cu130"]
    assert all("/root/venv.pvegpu-tmp" not in str(c) for c in commands)


def test_pvegpus_own_unit_never_stops_the_switch(monkeypatch):
    from pvegpu.plan.running_training import Trainer

    ours = Trainer(None, UNIT, UNIT, ours=True, unit=UNIT)
    made = {"ran": True, "rc": 0, "output": [], "clear": True, "check_error": None}
    commands, waits, failed, _ = gated_switch(monkeypatch, [ours], made)
    assert waits == [] and failed == [] and len(commands) == 1


def test_when_the_nodes_check_could_not_run_the_controller_switches_after_its_own(monkeypatch):
    # as before gated changes: the controller's check of that same read is clear, so its own
    # command switches
    made = {"ran": False, "rc": None, "output": [], "clear": False, "check_error": "OSError: 5"}
    commands, waits, failed, _ = gated_switch(monkeypatch, [], made)
    assert waits == [] and failed == []
    assert any("/root/venv.pvegpu-tmp" in str(c) for c in commands)


def test_a_failed_switch_fails_with_its_output(monkeypatch):
    made = {"ran": True, "rc": 1, "output": ["mv: cannot move"], "clear": True}
    commands, _, failed, remembered = gated_switch(monkeypatch, [], made)
    assert commands == [] and remembered == []
    assert failed and "exit 1" in failed[0][0] and failed[0][1] == "mv: cannot move"


def test_outside_execution_the_gate_only_reads(monkeypatch):
    from pvegpu.operations import training_gate

    asked = []
    monkeypatch.setattr(training_gate, "run_context", lambda state: SimpleNamespace(dry=False))
    monkeypatch.setattr(training_gate, "running_here", lambda host, **k: asked.append(k) or ["t"])
    monkeypatch.setattr(
        training_gate.gated, "gated_change", lambda *a: pytest.fail("a preview changed")
    )
    host = SimpleNamespace(state=SimpleNamespace(is_executing=False), data={})
    assert training_gate.change_when_clear(host, "mv x y", UNIT) == (["t"], None)
    assert asked == [{"unit": UNIT, "fresh": True}]
