# Stage 4, in each training container: facts, not hopes. Observes only: no change when it passes.
from pyinfra import host

from pvegpu.deploy_context import settings
from pvegpu.operations import checks

s = settings(host)

checks.torch_runtime(
    name=f"Verify torch {s.torch_pin.split('==')[1]} sees {s.expected_gpu_count} GPUs",
    python=f"{s.venv_path}/bin/python",
    settings=s,
)
