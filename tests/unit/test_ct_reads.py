"""Container reads folded into the node read's exec (pvegpu.run.ct_reads, issue 14): the node probe
runs them after the container's view and returns each one's stdout and exit status; a fact is
served from there only while that read is current, ran exactly its command, and exited 0."""

import ast
import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from pvegpu.facts.probe import probe_source
from pvegpu.run import ct_reads
from pvegpu.run.node_read import Request
from pvegpu.run.run_context import Entry, run_context


def probe_functions():
    """The node probe's functions and constants, without running the probe."""
    tree = ast.parse(probe_source("node_state"))
    keep = [
        n
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef))
        or isinstance(n, ast.Assign)
        and all(isinstance(t, ast.Name) and t.id.isupper() and t.id != "A" for t in n.targets)
        or isinstance(n, ast.AnnAssign)
        and n.target.id.isupper()
    ]
    ns = {"A": {"installer_tools": ["ldconfig"]}}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "node_state", "exec"), ns)
    return ns


@pytest.fixture
def fake_pct(tmp_path, monkeypatch):
    """A `pct` whose `exec <vmid> -- argv` runs argv here (the view's sh script)."""
    tool = tmp_path / "pct"
    tool.write_text('#!/bin/sh\n[ "$1" = exec ] && [ "$3" = -- ] || exit 2\nshift 3\nexec "$@"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_the_views_exec_runs_the_reads_after_the_view(fake_pct):
    p = probe_functions()
    reads = ["printf 'a\\nb\\n'", "printf x", "echo out; echo err >&2; exit 3", "true"]
    status, view, done = p["container_view"](p["start_view"](200, "u.service", reads))
    assert status == "running" and view is not None and "driver_version" in view
    assert done == [
        {"rc": 0, "stdout": ["a", "b"]},
        {"rc": 0, "stdout": ["x"]},  # no newline at the end: the line still comes back whole
        {"rc": 3, "stdout": ["out"]},
        {"rc": 0, "stdout": []},
    ]


def test_a_view_without_reads_is_as_before(fake_pct):
    p = probe_functions()
    status, view, done = p["container_view"](p["start_view"](200, None, []))
    assert status == "running" and view["missing_tools"] == [] and done == []


def test_verifys_exec_runs_the_reads_alone(fake_pct, tmp_path):
    # ct_detail "reads" (verify.py's one node command): the reads in the container's one exec,
    # without the view's commands (no systemctl, no stat of the device nodes)
    p = probe_functions()
    tool = tmp_path / "systemctl"  # found first on PATH: a view would run it
    tool.write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\n")
    tool.chmod(0o755)
    status, view, done = p["container_view"](
        p["start_view"](200, "u.service", ["printf 'a\\nb\\n'", "exit 3"], whole=False)
    )
    assert status == "running" and view == p["empty_view"]()
    assert done == [{"rc": 0, "stdout": ["a", "b"]}, {"rc": 3, "stdout": []}]
    assert not (tmp_path / "ran").exists()


def reads_dirs() -> set[str]:
    return {p.name for p in Path("/tmp").glob("pvegpu-reads.*")}


def test_the_folded_reads_run_side_by_side_and_leave_nothing_behind(fake_pct, tmp_path):
    p = probe_functions()
    flag = tmp_path / "flag"
    # the first read sees the second one's file only when they run side by side (one after the
    # other, it gives up after 10 s and prints "alone")
    reads = [
        f"i=0; while [ ! -e {flag} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
        f"[ -e {flag} ] && echo seen || echo alone",
        f"touch {flag}; echo done",
    ]
    before = reads_dirs()
    status, view, done = p["container_view"](p["start_view"](200, "u.service", reads))
    assert status == "running" and view is not None
    assert done == [{"rc": 0, "stdout": ["seen"]}, {"rc": 0, "stdout": ["done"]}]
    assert reads_dirs() <= before  # the reads' private directory is gone


def test_without_a_scratch_directory_the_reads_run_one_after_the_other(fake_pct, tmp_path):
    p = probe_functions()
    tool = tmp_path / "mktemp"  # found first on PATH (fake_pct put tmp_path there)
    tool.write_text("#!/bin/sh\necho 'mktemp: No space left on device' >&2\nexit 1\n")
    tool.chmod(0o755)
    reads = ["printf 'a\\nb\\n'", "echo out; exit 3", "true"]
    status, view, done = p["container_view"](p["start_view"](200, "u.service", reads))
    assert status == "running" and view is not None
    assert done == [
        {"rc": 0, "stdout": ["a", "b"]},
        {"rc": 3, "stdout": ["out"]},
        {"rc": 0, "stdout": []},
    ]


def test_a_read_cut_short_is_left_out():
    p = probe_functions()
    out = 'module x\nend\npvegpu-read 0\n{}\npvegpu-read-end 0 0\npvegpu-read 1\n{"a"'
    view, done = p["split_reads"](out)
    assert view == ["module x"] and done == [{"rc": 0, "stdout": ["{}"]}]


class FakeState:
    """pyinfra's State as the run context sees it (hashable, weakly referenced, with ``ops``)."""

    def __init__(self, ops):
        self.ops = ops


def read_entry(doc, reads=None):
    """The run's cached node read: its document and the request it answered."""
    return Entry(0, doc, Request((200,), "full", {}, (), reads))


def state_with(read, executed=0):
    ops = {
        f"op{i}": SimpleNamespace(operation_meta=SimpleNamespace(executed=True))
        for i in range(executed)
    }
    state = FakeState(ops={"127.0.0.1": ops})  # an operation of the node
    run_context(state).facts.entries[("node", "127.0.0.1")] = read
    return state


def ct_host(state):
    return SimpleNamespace(data={"pct_node": "127.0.0.1", "pct_vmid": 200}, state=state)


READ = read_entry(
    {
        "containers": {
            "200": {
                "reads": [
                    {"rc": 0, "stdout": ['{"venv_link": null}']},
                    {"rc": 1, "stdout": ["{}"]},
                ]
            }
        }
    },
    {"200": ["read-state", "read-verification", "never-ran"]},
)


def test_a_folded_read_serves_exactly_its_command_while_current():
    ct = ct_host(state_with(READ))
    assert ct_reads.folded_output(ct, "read-state") == ['{"venv_link": null}']
    assert ct_reads.folded_output(ct, "read-verification") is None  # exit 1: read it again
    assert ct_reads.folded_output(ct, "never-ran") is None  # no answer came back for it
    assert ct_reads.folded_output(ct, "another-command") is None


def test_a_folded_read_is_stale_once_an_operation_ran_commands():
    ct = ct_host(state_with(READ, executed=1))
    assert ct_reads.folded_output(ct, "read-state") is None


def test_a_node_read_without_folded_reads_serves_none():
    ct = ct_host(state_with(read_entry({"containers": {"200": {}}})))
    assert ct_reads.folded_output(ct, "read-state") is None


def test_the_folded_line_is_what_pct_exec_runs_after_its_double_dash():
    line = ct_reads.shell_command(200, "sh -c 'python3 -c \"print(1)\"'")
    assert line.startswith("env -i PATH=/usr/local/sbin:")
    assert line.endswith(" sh -c 'sh -c '\"'\"'python3 -c \"print(1)\"'\"'\"''")


def test_the_node_probes_commands_started_early_are_collected_by_run():
    p = probe_functions()
    argv = ["sh", "-c", "echo started; echo note >&2; exit 4"]
    p["start_early"](argv, ["no-such-tool-pvegpu"])
    assert tuple(argv) in p["STARTED"]
    assert p["run"](argv) == (4, "started\n", "note\n")
    assert p["STARTED"] == {}  # collected once; a missing tool was never started
    assert p["run"](["no-such-tool-pvegpu"])[0] == 127


def folded_lines(s):
    """One default container's folded reads as preflight_reads makes them (no sudo etc.)."""
    import shlex

    from pvegpu.facts.python_env import ContainerState
    from pvegpu.facts.verification import ContainerVerification
    from pvegpu.operations.checks import verification_args
    from pvegpu.operations.container_fact import container_state_args

    return [
        ct_reads.shell_command(200, "sh -c " + shlex.quote(cls().command(**kw)))
        for cls, kw in (
            (ContainerState, container_state_args(s)),
            (ContainerVerification, verification_args(s)),
        )
    ]


def _instrumented_by_mutmut() -> bool:
    """Under mutation testing (bench/mutation.py) mutmut rewrites guard.py, which every deleting
    probe carries, or a probe (probes/training_held.py, the verification probe's prelude) with its
    trampolines: the probe's size is then mutmut's, not the product's."""
    from importlib import resources

    sources = [resources.files("pvegpu").joinpath("guard.py")]
    sources += [f for f in resources.files("pvegpu.probes").iterdir() if f.name.endswith(".py")]
    return any("mutmut" in f.read_text() for f in sources)


@pytest.mark.skipif(_instrumented_by_mutmut(), reason="probe sources instrumented by mutmut")
def test_every_containers_reads_fold_and_every_argument_stays_one_argument_long():
    """Issue 22: no fixed budget that only the first container fits. The reads travel on the node
    command's stdin; each container's reads are its own exec's script (one argument each)."""
    from pvegpu.facts.proxmox import NodeState, reads_stdin
    from pvegpu.settings import Settings, defaults

    lines = folded_lines(Settings.from_data(defaults()))
    six = ct_reads.within_budget({str(v): lines for v in range(200, 206)})
    assert six == {str(v): lines for v in range(200, 206)}  # every container folds both reads
    command = NodeState().command(vmids=list(range(200, 206)), reads_on_stdin=True)
    assert len(command) < 128 * 1024 - 4096  # MAX_ARG_STRLEN, with room for pyinfra's quoting
    assert json.loads(reads_stdin(six)) == six
    p = probe_functions()
    script = p["with_reads"](
        p["CT_SCRIPT"]
        % {"lib": "/l", "unit": "u.service", "tools": "", "marker": "#", "build": "/root/venvs/b"},
        lines,
    )
    assert len(script) < ct_reads.MAX_ARG_STRLEN - 1024


def test_a_change_folded_with_reads_fails_as_it_would_alone():
    # a build script's `set -e` still stops it at its first failure (the shell ignores it in
    # `{ ...; } || exit`), its status is the command's, and no read runs after a failed change
    import subprocess

    script = ct_reads.change_then_read_script("set -e\nfalse\necho after", ["echo read"])
    p = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert p.returncode == 1 and p.stdout == ""
    script = ct_reads.change_then_read_script("set -e\necho made", ["false", "echo r"])
    p = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("made\n")
    assert ct_reads.split_reads(p.stdout.splitlines(), ["false", "echo r"]) == {"echo r": ["r"]}
    script = ct_reads.change_then_read_script("exit 4", ["echo r"])
    assert subprocess.run(["sh", "-c", script], capture_output=True).returncode == 4
