# Read-only: gathers the verification facts and fails loudly; changes nothing.
#   pyinfra inventory.py verify.py [-y] [--data verify_level=compile]
#       [--data verify_report=out.json]
# Every host's settings are validated first (a bad value stops the run before any command). The
# node's driver and GPUs are not preflighted here as deploy.py does: they are verified facts, shown
# in each container's table with everything else.
from pyinfra import host, local

from pvegpu.startup.deploy_context import begin

begin(host, "verify")  # read-only: prints the verdict in the preview too (without -y)

if "training_cts" in host.groups:
    local.include("tasks/verify.py")
