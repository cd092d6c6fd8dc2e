# Stage 5, in each training container: the verified build goes live (the venv link) together with
# its rendered unit, in one command; old builds pruned; the unit enabled, started when not running,
# restarted only with restart_training=true (stop, wait, clear leftover training processes on the
# training GPUs via the node, start). See pvegpu.operations.training.
from pyinfra import host

from pvegpu.operations import python_env, training
from pvegpu.plan.unit import unit_file
from pvegpu.startup.deploy_context import settings

s = settings(host)
unit = unit_file(s.training)

training.live_build_and_unit(
    name=f"Switch {s.python_env.venv_path} to {s.torch.build_name}, install {unit}", settings=s
)
python_env.venvs_pruned(
    name=f"Keep {s.python_env.keep_venvs} venv builds", torch=s.torch, python_env=s.python_env
)
training.unit_running(
    name=f"Enable and start {unit}"
    + (
        " (restart it when outdated: restart_training=true)"
        if s.policy.restart_training
        else " (never restart it: restart_training=false)"
    ),
    settings=s,
)
