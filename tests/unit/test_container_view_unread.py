"""The container stage's checks on what a container itself shows (its NVIDIA userspace, its
compiler) fail closed: a container that may run but whose own view gave no whole answer is read
once more, then refused with one line, never passed over as "no changes" (a build would then be
checked without its driver userspace and fail later with a misleading line)."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
from pyinfra.api import FunctionCommand

from pvegpu.operations import container_software as cs
from pvegpu.settings import Settings, defaults

GPUS = Settings.from_data(defaults()).gpus
RUNNING_UNREAD = {"exists": True, "status": "running", "live": None}
LIVE = {
    "driver_version": "580.95.05",
    "libs": {"libcuda.so.1": None, "libnvidia-ml.so.1": None},
    "nvidia_smi": False,
    "missing_tools": [],
    "toolchain": {"cc": "/usr/bin/gcc", "cc_version": "12.2.0", "python": "3.11", "python_h": True},
}


def reads(monkeypatch, *cts) -> list[bool]:
    """Serve ``cts`` as the node's reads of CT 200, one per call; the ``fresh`` flags asked."""
    asked, queue = [], list(cts)

    def node_state(vmid, detail="full", fresh=False):
        asked.append(fresh)
        ct = queue.pop(0) if len(queue) > 1 else queue[0]
        return {"driver_version": "580.95.05", "containers": {"200": ct}}, ct

    monkeypatch.setattr(cs, "node_state", node_state)
    monkeypatch.setattr(cs, "running_here", lambda host, vmid: [])
    monkeypatch.setattr(cs, "host", SimpleNamespace(name="n1", state=None))
    return asked


def shown(commands) -> list[str]:
    """Each yielded command as text; a failure or note as its lines (as test_operation_tables)."""
    out = []
    for c in commands:
        if isinstance(c, FunctionCommand):
            out.extend(inspect.getclosurevars(c.function).nonlocals.get("lines") or ())
        else:
            out.append(str(c))
    return out


OPS = {
    "userspace": (lambda: cs.driver_userspace._inner(vmid=200, gpus=GPUS), "its NVIDIA userspace"),
    "toolchain": (
        lambda: cs.compile_toolchain._inner(vmid=200),
        "its C compiler and Python headers",
    ),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_running_container_whose_view_never_answers_is_refused_after_a_second_read(
    monkeypatch, op
):
    asked = reads(monkeypatch, RUNNING_UNREAD)
    call, what = OPS[op]
    got = list(call())
    assert asked == [False, True]  # the run's read, then one read now
    assert len(got) == 1 and isinstance(got[0], FunctionCommand)  # one failing line, no change
    assert shown(got) == [cs.unread_view_line(200, what)]


@pytest.mark.parametrize("status", ["running", None, "unknown"])
def test_the_second_read_that_answers_is_used(monkeypatch, status):
    asked = reads(
        monkeypatch,
        {**RUNNING_UNREAD, "status": status},
        {"exists": True, "status": "running", "live": LIVE},
    )
    got = shown(cs.driver_userspace._inner(vmid=200, gpus=GPUS))
    assert asked == [False, True]
    assert got and not any("could not be read" in c for c in got)  # the view's mismatch acted on


@pytest.mark.parametrize(
    "ct", [{"exists": False}, {"exists": True, "status": "stopped", "live": None}]
)
def test_a_container_not_made_yet_or_stopped_has_nothing_to_compare(monkeypatch, ct):
    asked = reads(monkeypatch, ct)
    assert list(cs.driver_userspace._inner(vmid=200, gpus=GPUS)) == []
    assert list(cs.compile_toolchain._inner(vmid=200)) == []
    assert asked == [False, False]
