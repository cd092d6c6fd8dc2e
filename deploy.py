# The whole converge, in order: node -> container -> python env -> verify -> training unit.
#   pyinfra inventory.py deploy.py [--data torch_variant=cu128] [--data rebuild=venv|container] [-y]
# Settings of every host are checked first (pvegpu.startup.preflight): a bad value stops the run
# before anything changes. Then each node's deploy lock is taken (one deploy at a time per node,
# held until the run ends) and its GPUs are checked: an unfit or busy node stops only its own hosts.
#
# pyinfra runs the ready operations of different hosts side by side, so the stages of different
# host groups are ordered by barriers: one operation every host runs, that none passes before all
# hosts finished what comes before it.
from pyinfra import host, local

from pvegpu.operations.fleet import node_outcome, node_ready
from pvegpu.operations.util import barrier
from pvegpu.startup.changes_start import changes_start
from pvegpu.startup.deploy_context import begin, node_problems

s = begin(host, "deploy")
# A node that failed its preflight, or whose deploy lock another deploy holds, stops here with its
# containers, before any change; the other nodes go on. One summary line per node at the end.
refused = node_problems(host)
node_ready(name="Preflight of this host's node passed", problems=refused, at_start=changes_start)

# A node the preflight refused changes nothing: its stages are not even previewed.
if not refused:
    if s.policy.rebuild and "training_cts" in host.groups:
        local.include("tasks/rebuild_report.py")
    barrier(name="Rebuild report printed")

    if "pve_hosts" in host.groups:
        local.include("tasks/node_gpu.py")
        if s.policy.rebuild == "container":
            local.include("tasks/rebuild_node.py")
        local.include("tasks/container.py")
    barrier(name="Nodes and containers ready")

    if "training_cts" in host.groups:
        local.include("tasks/rebuild_venv.py")
        local.include("tasks/python_env.py")
        if s.verification.level == "compile" and s.policy.restart_training:
            local.include("tasks/stop_for_compile.py")
        local.include("tasks/verify.py")
    barrier(name="New builds verified")

    # restart_training=true: a training pvegpu did not start is stopped only now, once the new
    # build is verified (a failed build or verification leaves it running), then the changes
    # that waited for it
    if "pve_hosts" in host.groups and s.policy.restart_training:
        local.include("tasks/takeover.py")
    barrier(name="Trainings taken over")

    if "training_cts" in host.groups:
        local.include("tasks/training_unit.py")
        # last: a restarted unit no longer uses the builds rebuild=venv replaced
        local.include("tasks/rebuild_cleanup.py")

# The exit status matches each node's closing line: a node whose containers this run did not
# verify (--limit left them out, say) fails here when nothing else failed it.
node_outcome(name="Every container of this node verified in this run")
