# The whole converge, in order: node -> container -> python env -> verify -> training unit.
#   pyinfra inventory.py deploy.py [--data torch_variant=cu128] [-y]
# Settings of every host and the GPUs of every node are checked first (pvegpu.preflight): a bad
# value or an unfit node stops the run before anything changes.
from pyinfra import host, local

from pvegpu.deploy_context import settings
from pvegpu.operations.util import barrier

settings(host)

if "pve_hosts" in host.groups:
    local.include("tasks/node_gpu.py")
    local.include("tasks/container.py")

# Every host runs this one operation: containers wait for their nodes' stages to finish.
barrier(name="Nodes and containers ready")

if "training_cts" in host.groups:
    local.include("tasks/python_env.py")
    local.include("tasks/verify.py")
    local.include("tasks/training_unit.py")
