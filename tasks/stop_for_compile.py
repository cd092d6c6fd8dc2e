# Before stage 4 with --data verify_level=compile --data restart_training=true only: the compile
# check compiles and allocates on every GPU, so the running training unit is stopped first (its
# checkpoint written); it starts again after verify (tasks/training_unit.py), or at once when the
# verification fails. See pvegpu.operations.training.stopped_for_compile_check.
from pyinfra import host

from pvegpu.operations import training
from pvegpu.plan.unit import unit_file
from pvegpu.startup.deploy_context import settings

s = settings(host)

training.stopped_for_compile_check(
    name=f"Stop {unit_file(s.training)} for the compile check (restart_training=true)",
    settings=s,
)
