# Read-only: gathers the verification facts and fails loudly; changes nothing.
#   pyinfra inventory.py verify.py
from pyinfra import host, local

from pvegpu.deploy_context import settings

settings(host)

if "training_cts" in host.groups:
    local.include("tasks/verify.py")
