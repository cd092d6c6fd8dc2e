"""Which cached reads a run serves after which operations (issue 14: a swap back makes one node
read): verify's read of the node alone stays current past operations that changed only their own
container; a read of containers, of node paths, or folded container reads does not; the reads a
change ran in its own exec serve only the operation right after it."""

import subprocess
from types import SimpleNamespace

from pvegpu.run import ct_reads, node_read
from pvegpu.run.run_context import (
    executed_operations,
    mark_container_only,
    node_changing_operations,
    run_context,
)


class FakeState:
    """pyinfra's State as the run context sees it: ``ops`` {host: {op hash: op data}}."""

    def __init__(self):
        self.ops = {}


def run_op(state, host_name, op_hash, container_only=False):
    """An operation of ``host_name`` that ran commands (marked container-only when asked)."""
    host = SimpleNamespace(name=host_name, state=state, current_op_hash=op_hash)
    if container_only:
        mark_container_only(host)
    meta = SimpleNamespace(operation_meta=SimpleNamespace(executed=True))
    state.ops.setdefault(host_name, {})[op_hash] = meta


class FakeNode:
    """A node host whose NodeState reads are counted."""

    def __init__(self, state):
        self.state, self.name, self.reads = state, "n", []

    def get_fact(self, cls, **kwargs):
        self.reads.append(kwargs)
        return {"gpus": [], "containers": {"200": {"status": "running"}}, "read": len(self.reads)}


def test_a_container_only_operation_is_not_counted_as_changing_the_node():
    state = FakeState()
    run_op(state, "@pct/n/200", "switch", container_only=True)
    run_op(state, "@pct/n/200", "restart")
    assert (executed_operations(state), node_changing_operations(state)) == (2, 1)


def test_an_operation_outside_a_body_is_never_marked():
    state = FakeState()
    mark_container_only(SimpleNamespace(name="h", state=state, current_op_hash=None))
    assert run_context(state).container_only == set()


def test_the_node_alone_is_served_past_container_only_operations():
    state = FakeState()
    node = FakeNode(state)
    node_read.node_state(node, (200,), "full", {"unit_name": "u"})  # the preflight's read
    run_op(state, "@pct/n/200", "switch", container_only=True)
    run_op(state, "@pct/n/200", "unit file", container_only=True)
    assert node_read.node_state(node)["read"] == 1  # verify's read of the node: no new read
    assert len(node.reads) == 1


def test_the_node_is_read_again_after_an_operation_that_may_change_it():
    state = FakeState()
    node = FakeNode(state)
    node_read.node_state(node, (200,), "full", {"unit_name": "u"})
    run_op(state, "@pct/n/200", "switch", container_only=True)
    run_op(state, "@pct/n/200", "start the unit")  # GPU processes on the node change
    assert node_read.node_state(node)["read"] == 2


def test_containers_and_paths_are_read_again_past_container_only_operations():
    state = FakeState()
    node = FakeNode(state)
    node_read.node_state(node, (200,), "full", {"unit_name": "u"}, ("/tank/dflash",))
    run_op(state, "@pct/n/200", "unit file", container_only=True)
    assert node_read.node_state(node, (200,), "status")["read"] == 2  # its unit may differ
    run_op(state, "@pct/n/200", "caches", container_only=True)
    assert node_read.node_state(node, (), "none", None, ("/tank/dflash",))["read"] == 3


def test_folded_container_reads_are_stale_after_any_operation():
    state = FakeState()
    node = FakeNode(state)
    ct = SimpleNamespace(
        data={"pct_node": node.name, "pct_vmid": 200}, state=state, name="@pct/n/200"
    )
    reads = {"200": ["read-verification"]}
    node.get_fact = lambda cls, **kw: {
        "containers": {"200": {"reads": [{"rc": 0, "stdout": ["{}"]}]}}
    }
    node_read.node_state(node, (200,), "full", {}, (), reads)
    assert ct_reads.folded_output(ct, "read-verification") == ["{}"]
    run_op(state, ct.name, "switch", container_only=True)
    assert ct_reads.folded_output(ct, "read-verification") is None  # the venv it read changed


def run_script(script):
    p = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    return p.returncode, p.stdout.splitlines()


def test_the_reads_run_after_the_change_and_only_when_it_succeeded():
    lines = ["printf 'a\\nb'", "echo half; exit 3", "echo '{}'"]
    rc, out = run_script(ct_reads.change_then_read_script("true && echo changed", lines))
    assert rc == 0 and out[0] == "changed"
    assert ct_reads.split_reads(out, lines) == {lines[0]: ["a", "b"], lines[2]: ["{}"]}
    rc, out = run_script(ct_reads.change_then_read_script("true && exit 4", lines))
    assert rc == 4 and ct_reads.split_reads(out, lines) == {}


def test_a_read_after_a_change_serves_only_the_operation_right_after_it():
    state = FakeState()
    ct = SimpleNamespace(state=state, name="@pct/n/200", data={"pct_node": "n"})
    # what change_then_read keeps, valid once its own operation counts as run
    run_context(state).facts.entries[("after", ct.name)] = node_read.Entry(1, {"read": ["{}"]})
    assert ct_reads.read_after_change(ct, "read") is None  # its operation is still running
    run_op(state, ct.name, "switch", container_only=True)
    assert ct_reads.read_after_change(ct, "read") == ["{}"]
    assert ct_reads.read_after_change(ct, "another read") is None
    run_op(state, ct.name, "prune", container_only=True)
    assert ct_reads.read_after_change(ct, "read") is None


class ShellHost:
    """A host whose commands run here in sh (as the @pct connector would run them there)."""

    def __init__(self, state):
        self.state, self.name, self.ran = state, "@pct/n/200", []
        self.data = {"pct_node": "n", "pct_vmid": 200}

    def run_shell_command(self, command, **kwargs):
        self.ran.append(command)
        p = subprocess.run(["sh", "-c", command.get_raw_value()], capture_output=True, text=True)
        out = SimpleNamespace(stdout_lines=p.stdout.splitlines(), combined_lines=[])
        return p.returncode == 0, out


def executing_shell_host():
    """A run that executes (-y), and its one host running commands through sh."""
    state = FakeState()
    state.is_executing, state.print_output, state.print_input = True, False, False
    return state, ShellHost(state)


def test_change_then_read_keeps_the_reads_for_the_next_operation(monkeypatch):
    monkeypatch.setattr(ct_reads, "folded_commands", lambda host, reads: ["echo '{\"a\": 1}'"])
    state, host = executing_shell_host()
    command = ct_reads.change_then_read(host, "true", [("fact", {})])
    assert command.execute(state, host, {})[0] is True and len(host.ran) == 1  # one exec for both
    run_op(state, host.name, "switch", container_only=True)
    assert ct_reads.read_after_change(host, "echo '{\"a\": 1}'") == ['{"a": 1}']


def test_a_failed_change_fails_its_operation_and_keeps_no_read(monkeypatch):
    monkeypatch.setattr(ct_reads, "folded_commands", lambda host, reads: ["echo '{}'"])
    state, host = executing_shell_host()
    command = ct_reads.change_then_read(host, "false", [("fact", {})])
    assert command.execute(state, host, {})[0] is False
    assert ("after", host.name) not in run_context(state).facts.entries


def test_without_reads_the_change_runs_alone(monkeypatch):
    monkeypatch.setattr(ct_reads, "folded_commands", lambda host, reads: [])
    command = ct_reads.change_then_read(None, "mv -T a b", [])
    assert type(command).__name__ == "StringCommand" and command.get_raw_value() == "mv -T a b"


def test_an_operation_on_another_node_leaves_this_nodes_reads_current():
    """Issue 22: in a fleet, node m's operations change nothing node n's reads hold, so they do
    not make n read again (each node's reads were stale after any node's operation before)."""
    state = FakeState()
    node = FakeNode(state)
    ct = SimpleNamespace(data={"pct_node": "n", "pct_vmid": 200}, state=state, name="@pct/n/200")
    node.get_fact = lambda cls, **kw: {
        "containers": {"200": {"reads": [{"rc": 0, "stdout": ["{}"]}]}}
    }
    node_read.node_state(node, (200,), "full", {}, (), {"200": ["read-state"]})
    run_op(state, "m", "install the driver")
    run_op(state, "@pct/m/200", "start the unit")
    assert node_read.last_read(state, "n") is not None
    assert ct_reads.folded_output(ct, "read-state") == ["{}"]
    assert (executed_operations(state), executed_operations(state, "n")) == (2, 0)
    run_op(state, "@pct/n/200", "start the unit")
    assert ct_reads.folded_output(ct, "read-state") is None


def test_hosts_asking_for_one_node_side_by_side_share_one_read():
    """Issue 22: verify.py's containers of one node ask for its read at once (greenlets): the
    second waits for the first's read and is served from it."""
    import gevent

    state = FakeState()
    node = FakeNode(state)
    slow = node.get_fact

    def get_fact(cls, **kwargs):
        gevent.sleep(0.01)  # the read's round trip: the other greenlet asks meanwhile
        return slow(cls, **kwargs)

    node.get_fact = get_fact
    docs = [g.get() for g in [gevent.spawn(node_read.node_state, node) for _ in range(2)]]
    assert [d["read"] for d in docs] == [1, 1] and len(node.reads) == 1
