# Stage 5, in each training container: the training unit, rendered, enabled, started when not
# running, restarted only with restart_training=true (stop, wait, clear leftover training
# processes on the training GPUs via the node, start). See pvegpu.operations.training.
from pyinfra import host

from pvegpu.operations import training
from pvegpu.plan.unit import unit_file
from pvegpu.startup.deploy_context import settings

s = settings(host)
unit = unit_file(s.training)

training.unit_installed(name=f"Install {unit}", settings=s)
training.unit_running(
    name=f"Enable and start {unit}"
    + (" (restart it when outdated: restart_training=true)" if s.policy.restart_training else
       " (never restart it: restart_training=false)"),
    settings=s,
)
