"""The closing line of a node (pvegpu.output.outcome): one state per node run, the first that
applies, and whether the run may exit 0 with it."""

from __future__ import annotations

import pytest

from pvegpu.output import outcome
from pvegpu.output.outcome import NodeRun, State, add_state, decide, ok
from pvegpu.plan.restart_hint import RestartHint
from pvegpu.plan.running_training import HAND, Trainer

CT = "@pct/pve1/200"


def run(**kw) -> NodeRun:
    return NodeRun("pve1", containers=[CT], **kw)


STATES = [
    # (the node's run, its state, a part of its line)
    (run(verdicts={CT: True}), "verified", "pvegpu: pve1: converged and verified"),
    (
        run(verdicts={CT: True}, pending={CT: ["venv build a -> b"]}),
        "restart pending",
        "converged and verified; the training's restart is pending (CT 200: venv build a -> b): "
        "rerun with --data restart_training=true to restart it",
    ),
    (
        run(
            verdicts={CT: True},
            waiting=["CT 200: x waits", "CT 200: y waits"],
            waiting_for=Trainer(4242, "python t.py", HAND),
        ),
        "waiting",
        "converged; 2 changes wait for the running training (pid 4242, started by hand): rerun "
        "with --data restart_training=true to apply them",
    ),
    (
        run(in_run={"pve1"}),
        "not verified",
        "converged, not verified: CT 200 was not in this run (--limit or --exclude left it out)",
    ),
    (
        run(verdicts={CT: False}, failed={CT: "Verify torch 2.11.0+cu130 on 8 GPUs"}),
        "not verified",
        "not verified: the verification of CT 200 failed (its lines above say why)",
    ),
    (run(), "not verified", "not verified: no verification of CT 200 ran in this run"),
    (
        run(failed={CT: "Build venv"}, verdicts={}),
        "failed",
        "FAILED: @pct/pve1/200 at 'Build venv' (its lines above say why)",
    ),
    (
        run(refused=["pve1: driver too old", "pve1: no uvm"], failed={CT: "(stopped)"}),
        "refused",
        "refused, nothing changed there: pve1: driver too old (+1 more above)",
    ),
]


@pytest.mark.parametrize("node_run, state, line", STATES, ids=[s for _, s, _ in STATES])
def test_each_state_has_its_line(node_run, state, line):
    name, text = decide(node_run)
    assert name == state
    assert line in text and text.startswith("pvegpu: pve1: ")


def test_the_exit_status_may_be_zero_only_while_nothing_failed_or_went_unverified():
    assert [s.name for s in outcome.STATES if s.ok] == ["waiting", "restart pending", "verified"]
    assert not ok("refused") and not ok("failed") and not ok("not verified")


def test_a_refusal_wins_over_everything_and_a_failure_over_waiting():
    both = run(refused=["pve1: x"], failed={CT: "op"}, waiting=["w"], verdicts={CT: True})
    assert decide(both)[0] == "refused"
    failed = run(failed={"pve1": "op"}, waiting=["w"], waiting_for=Trainer(1, "t", HAND))
    assert decide(failed)[0] == "failed"
    # a change waits and a restart is pending: the change that waits is named
    waits = run(verdicts={CT: True}, waiting=["w"], waiting_for=Trainer(1, "t", HAND))
    assert decide(NodeRun(**{**waits.__dict__, "pending": {CT: ["x"]}}))[0] == "waiting"


def test_a_left_out_node_with_verified_containers_is_verified_and_says_so():
    name, line = decide(run(in_run={CT}, verdicts={CT: True}))
    assert name == "verified"
    assert "CT 200 converged and verified; the node's own stage was not in this run" in line


def test_a_node_without_containers_is_converged_without_claiming_a_verification():
    assert decide(NodeRun("pve1")) == (
        "verified",
        "pvegpu: pve1: converged (no training container)",
    )


def test_a_new_state_goes_where_it_is_put(monkeypatch):
    monkeypatch.setattr(outcome, "STATES", list(outcome.STATES))
    add_state(State("takeover failed", False, lambda r: f"pvegpu: {r.node}: T"), before="failed")
    assert decide(run(failed={CT: "op"})) == ("takeover failed", "pvegpu: pve1: T")
    assert decide(run(refused=["x"]))[0] == "refused"
    assert not ok("takeover failed")


def test_a_failure_after_the_takeover_says_how_to_start_each_stopped_training_again():
    hint = RestartHint(200, "x", unit="t")
    ctx = type("Ctx", (), {"taken_over": {"pve1": [hint]}, "venv_moved": {}})
    name, line = decide(run(failed={CT: "op"}, context=ctx()))
    assert name == "failed after the takeover" and not ok(name)
    assert line.startswith("pvegpu: pve1: FAILED: @pct/pve1/200 at 'op'")
    assert (
        "stopped 1 training(s): start again with `pct exec 200 -- systemctl enable --now t`" in line
    )
    # another node's takeover is not this node's
    other = type("Ctx", (), {"taken_over": {"pve2": [hint]}})
    assert decide(run(failed={CT: "op"}, context=other()))[0] == "failed"
    # nothing failed: the takeover alone is no failure
    assert decide(run(verdicts={CT: True}, context=ctx()))[0] == "verified"
