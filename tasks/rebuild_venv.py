# In each training container: the package baseline (for later pollution reports), and, with
# rebuild=venv, the refusal while the training unit runs without restart_training=true. The
# fresh build itself is made by the python env stage beside the live one (tasks/python_env.py).
from pyinfra import host

from pvegpu.operations import rebuild
from pvegpu.startup.deploy_context import settings

s = settings(host)

rebuild.venv_rebuild_allowed(
    name="Check that rebuild=venv may run", policy=s.policy, training=s.training
)
rebuild.baseline_recorded(name="Record the container's package baseline")
