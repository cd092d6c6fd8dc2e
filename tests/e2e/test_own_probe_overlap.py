"""verify.py while the node's compute-apps query lists the verification probe's own torch process
(a real CUDA runtime holds a context on every GPU it used, and NVML lists it): pvegpu's marked
probe in CT 200 is not a process "holding" a training GPU. The sim's torch double registers its
contexts and meets the node's query (SimNode.torch_config), so the overlap happens every time."""

import json

from tests.e2e.test_verify import problem_lines, verify_unchanged


def listed_contexts(node):
    text = node.run(["sh", "-c", "cat /var/lib/pve-sim/gpu/contexts-listed.log 2>/dev/null"]).stdout
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_verify_ignores_its_own_probe_listed_by_the_node(deployed):
    node = deployed.node
    node.torch_config(register_contexts=True, meet_node_query=True)
    try:
        run = verify_unchanged(deployed)
    finally:
        node.torch_config()
    # the node's query did list the probe's python (a context on at least one GPU) ...
    assert listed_contexts(node)
    # ... and verification neither failed nor warned about it
    assert run.rc == 0, "\n".join(problem_lines(run)) or run.stderr[-4000:]
    assert "held by pid" not in run.stderr and "outside dflash-train.service" not in run.stderr
    assert "VERIFIED CT 200 on 127.0.0.1" in run.stderr
