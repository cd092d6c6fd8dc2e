# Stage 4, in each training container: facts, not hopes. torch build and CUDA, every GPU (model,
# memory, UUID as the node reports, arch support, free memory, role), driver parity node vs
# container, no stale compute process, the venv equal to its lock, and with
# --data verify_level=compile the concurrent torch.compile check. Prints one table and a verdict
# per container; observes only: no change when it passes, one line per problem when it fails.
from pyinfra import host

from pvegpu.operations import checks
from pvegpu.startup.deploy_context import settings

s = settings(host)

checks.verified(
    name=f"Verify torch {s.torch.version}+{s.torch.variant} on {s.gpus.expected_count} GPUs"
    + (" (with concurrent compile)" if s.verification.level == "compile" else ""),
    settings=s,
)
