# Before a rebuild, in each training container: print what the rebuild removes (observes only).
from pyinfra import host

from pvegpu.operations import rebuild
from pvegpu.startup.deploy_context import settings

s = settings(host)

rebuild.pollution_report(
    name=f"Report what rebuild={s.policy.rebuild} removes",
    policy=s.policy,
    torch=s.torch,
    python_env=s.python_env,
)
