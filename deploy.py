# The whole converge, in order: node -> container -> python env -> verify -> training unit.
#   pyinfra inventory.py deploy.py [--data torch_variant=cu128] [--data rebuild=venv|container] [-y]
# Settings of every host and the GPUs of every node are checked first (pvegpu.preflight): a bad
# value or an unfit node stops the run before anything changes.
#
# pyinfra runs the ready operations of different hosts side by side, so the stages of different
# host groups are ordered by barriers: one operation every host runs, that none passes before all
# hosts finished what comes before it.
from pyinfra import host, local

from pvegpu.deploy_context import settings
from pvegpu.operations.util import barrier

s = settings(host)

if s.rebuild and "training_cts" in host.groups:
    local.include("tasks/rebuild_report.py")
barrier(name="Rebuild report printed")

if "pve_hosts" in host.groups:
    local.include("tasks/node_gpu.py")
    if s.rebuild == "container":
        local.include("tasks/rebuild_node.py")
    local.include("tasks/container.py")
barrier(name="Nodes and containers ready")

if "training_cts" in host.groups:
    local.include("tasks/rebuild_venv.py")
    local.include("tasks/python_env.py")
    local.include("tasks/rebuild_cleanup.py")
    local.include("tasks/verify.py")
    local.include("tasks/training_unit.py")
