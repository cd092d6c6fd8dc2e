# rebuild=venv, in each training container, after the switch to the fresh build (and the unit's
# restart, when asked): delete the builds it replaced (never the live one, never one in use).
from pyinfra import host

from pvegpu.operations import rebuild
from pvegpu.startup.deploy_context import settings

s = settings(host)

rebuild.old_builds_removed(
    name="Delete the venv builds rebuild=venv replaced",
    policy=s.policy,
    torch=s.torch,
    python_env=s.python_env,
)
