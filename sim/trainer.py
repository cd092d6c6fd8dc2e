"""A stand-in trainer for the simulated node (tests/e2e/test_adopt.py seeds it as the users'
train.py): it records each start (``started-<pid>`` in its checkpoint dir: the torch it imported,
the python it runs with) and, on SIGTERM, takes ``checkpoint_s`` seconds (a file in its checkpoint
dir; 0 without it) to write ``checkpoint-<pid>``, marking ``stopping-<pid>`` first, then exits 0:
a real trainer's graceful stop, whose length a test chooses (longer than the 30 s a SIGKILL used
to come after). With ``--exit-at-start N`` it exits N before it records a start: a run that
crashes while it loads (a unit's restarts). Its GPUs are registered on the node by its node pid
(SimNode.register_gpu_process), so the node's nvidia-smi lists it while it lives.

Under a launcher (torchrun: ``LOCAL_RANK`` in its environment) it takes its GPU as a DDP worker
does, before it records its start: ``torch.cuda.set_device(local_rank)`` and a first allocation
there, which makes the CUDA context (the torch double logs it in ``contexts.log`` and, with
``register_contexts``, the node's nvidia-smi lists the worker on that GPU). The second line of
``started-<pid>`` is JSON: its arguments and the launcher's rank variables.

``python3 sim/trainer.py --checkpoint-dir DIR`` runs it (torch optional: tests/sim run it on the
host).
"""

TRAINER = '''\
"""Stand-in trainer (sim/trainer.py): checkpoints on SIGTERM, taking checkpoint_s seconds."""
import json
import os
import signal
import sys
import time

try:
    import torch
    version = torch.__version__
except ImportError:  # on the host (tests/sim)
    torch = version = None

ckpt = sys.argv[sys.argv.index("--checkpoint-dir") + 1]
os.makedirs(ckpt, exist_ok=True)
pid = os.getpid()
if "--exit-at-start" in sys.argv:  # a run that crashes while it loads (a unit's restarts)
    sys.exit(int(sys.argv[sys.argv.index("--exit-at-start") + 1]))
local_rank = os.environ.get("LOCAL_RANK")
if local_rank is not None and torch is not None:
    # a DDP worker's first steps: its own GPU current, then a tensor there (the CUDA context)
    torch.cuda.set_device(int(local_rank))
    torch.zeros(1, device="cuda")
ranks = {k: os.environ[k] for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE") if k in os.environ}


def checkpoint(signum, frame):
    try:
        seconds = float(open(os.path.join(ckpt, "checkpoint_s")).read())
    except (OSError, ValueError):
        seconds = 0
    open(os.path.join(ckpt, f"stopping-{pid}"), "w").close()
    time.sleep(seconds)
    with open(os.path.join(ckpt, f"checkpoint-{pid}"), "w") as f:
        f.write("saved on SIGTERM\\n")
    sys.exit(0)


signal.signal(signal.SIGTERM, checkpoint)
with open(os.path.join(ckpt, f"started-{pid}"), "w") as f:
    f.write(f"{version} {sys.executable}\\n")
    f.write(json.dumps({"argv": sys.argv[1:], **ranks}) + "\\n")
while True:
    time.sleep(1)
'''
