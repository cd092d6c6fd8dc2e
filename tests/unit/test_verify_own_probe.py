"""pvegpu's own torch probe in CT 200 (argv ``python -c <source> pvegpu-probe``), listed by the
node's compute-apps query while it holds its CUDA contexts, is not counted; the same mark on the
node or in another container counts as before."""

import pytest

from pvegpu.facts.probe import probe_source
from pvegpu.verification import verify
from pvegpu.verification.processes import PROBE_MARK, is_own_probe
from tests.unit.verify_facts import UUID, ct_facts, node_facts, settings

PROBE_ARGV = ["/root/venv/bin/python", "-c", "import json\nimport torch\n", PROBE_MARK]
HERE = "0::/lxc/200/ns/user.slice/user-0.slice/session-1.scope"
UNIT = "dflash-train.service"


def probe_app(gpu, cgroup=None, argv=PROBE_ARGV, used=600):
    app = {
        "pid": 4321,
        "name": argv[0],
        "gpu_uuid": "GPU-" + UUID.format(gpu),
        "used_mib": used,
        "cmdline": " ".join(argv),
        "argv": list(argv),
    }
    if cgroup is not None:
        app["cgroup"] = cgroup
    return app


def run(apps, ct=None):
    return verify(
        settings(),
        node_facts(apps=apps),
        ct if ct is not None else ct_facts(),
        where="CT 200 on n1",
        vmid=200,
        node_name="n1",
        unit=UNIT,
    )


def test_the_probe_mark_is_what_the_verification_probe_sends():
    source = probe_source("verification")
    assert f'PROBE_MARK = "{PROBE_MARK}"' in source
    assert '[python, "-c", A["torch_inner"], PROBE_MARK]' in source
    assert '[python, "-c", source, PROBE_MARK]' in source


def test_own_probe_on_every_gpu_is_neither_a_problem_nor_a_warning():
    v = run([probe_app(g, HERE) for g in range(8)])
    assert v.ok and v.problems == [] and v.warnings == []
    assert all(r["status"] == "ok" for r in v.rows), v.rows


def test_own_probe_memory_counts_as_free():
    ct = ct_facts()
    ct["torch"]["devices"][0]["free_mib"] = 800  # below min_free_gpu_mib (1024) without it
    assert run([probe_app(0, HERE, used=600)], ct=ct).ok
    assert [p.check for p in run([], ct=ct).problems] == ["GPU 0 (target) memory"]


@pytest.mark.parametrize(
    "cgroup, where",
    [
        (None, "pid 4321 ("),  # on the node
        ("0::/lxc/201/ns/user.slice/session-1.scope", "pid 4321 in CT 201"),
        ("0::/lxc.payload.201/init.scope", "pid 4321 in CT 201"),
    ],
)
def test_the_mark_outside_this_container_is_reported_as_before(cgroup, where):
    v = run([probe_app(6, cgroup)])
    assert [p.check for p in v.problems] == ["GPU 6 (drafter) free"]
    assert where in v.lines()[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["/root/venv/bin/python", "-c", "import torch"],  # no mark
        ["/root/venv/bin/python", "/root/x.py", "-c", PROBE_MARK],  # not after -c <source>
        ["/root/venv/bin/python", "-c", "x", "other", PROBE_MARK],
    ],
)
def test_an_unmarked_process_of_this_container_is_reported_as_before(argv):
    v = run([probe_app(2, HERE, argv=argv)])
    assert [p.check for p in v.problems] == ["GPU 2 (target) free"]
    assert "pid 4321 in CT 200 (outside dflash-train.service)" in v.lines()[0]


def test_is_own_probe_needs_this_container_and_the_exact_argv():
    assert is_own_probe(probe_app(0, HERE), 200, UNIT)
    assert is_own_probe(probe_app(0, HERE), 200, None)
    assert not is_own_probe(probe_app(0, HERE), 201, UNIT)
    assert not is_own_probe(probe_app(0), 200, UNIT)
    cmdline_only = {k: v for k, v in probe_app(0, HERE).items() if k != "argv"}
    assert not is_own_probe(cmdline_only, 200, UNIT)  # the source's spaces make it ambiguous
