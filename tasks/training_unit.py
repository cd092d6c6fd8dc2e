# Stage 5, in each training container: the training unit, rendered, enabled, started.
from pyinfra import host

from pvegpu.deploy_context import settings
from pvegpu.operations import training

s = settings(host)

training.unit_installed(name=f"Install {s.training_unit_name}.service", settings=s)
training.unit_running(name=f"Enable and start {s.training_unit_name}.service", settings=s)
