"""A stand-in trainer for the simulated node (tests/e2e/test_adopt.py seeds it as the users'
train.py): it records each start (``started-<pid>`` in its checkpoint dir: the torch it imported,
the python it runs with) and, on SIGTERM, takes ``checkpoint_s`` seconds (a file in its checkpoint
dir; 0 without it) to write ``checkpoint-<pid>``, marking ``stopping-<pid>`` first, then exits 0:
a real trainer's graceful stop, whose length a test chooses (longer than the 30 s a SIGKILL used
to come after). With ``--exit-at-start N`` it exits N before it records a start: a run that
crashes while it loads (a unit's restarts). Started by hand (no ``CUDA_VISIBLE_DEVICES``), its
GPUs are registered on the node by its node pid (SimNode.register_gpu_process), so the node's
nvidia-smi lists it while it lives; given GPUs (``CUDA_VISIBLE_DEVICES``, as pvegpu's unit sets
it), it takes a CUDA context on each before it records its start, listed by nvidia-smi (on the
node and, by its own pid, in its container: ``torch._sim.register_own_contexts``).

Under a launcher (torchrun: ``LOCAL_RANK`` in its environment) it takes its GPU as a DDP worker
does, before it records its start: ``torch.cuda.set_device(local_rank)`` and a first allocation
there, which makes the CUDA context (the torch double logs it in ``contexts.log``, and
nvidia-smi lists the worker on that GPU). The second line of
``started-<pid>`` is JSON: its arguments, the launcher's rank variables and
``CUDA_VISIBLE_DEVICES`` when set.

Like most real trainers it loads data with helper processes (torch's DataLoader workers):
``helpers`` in its checkpoint dir says how many (default 2), forked before it records its start
(their pids in ``helpers-<pid>``), each with the trainer's very argv. They follow torch's rules
(torch/csrc/DataLoader.cpp ``handler_SIGTERM``, torch/utils/data/_utils/signal_handling.py): a
helper exits quietly on SIGTERM only when its parent sent it, otherwise it dies by the signal, and
the trainer's SIGCHLD handler then raises ``RuntimeError: DataLoader worker (pid(s) N) exited
unexpectedly`` wherever it is, a checkpoint in progress included (exit 1, no checkpoint). SIGTERM
to the trainer only sets a flag that the next step boundary (every second) reads: then the
checkpoint, then the helpers ended by their parent, then exit 0. A helper whose parent is gone
exits (torch's worker watchdog).

``python3 sim/trainer.py --checkpoint-dir DIR`` runs it (torch optional: tests/sim run it on the
host).
"""

TRAINER = '''\
"""Stand-in trainer (sim/trainer.py): DataLoader-like helpers; checkpoints at the step boundary
after SIGTERM, taking checkpoint_s seconds."""
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
    torch._sim.register_own_contexts()  # listed by nvidia-smi as a real worker is
    torch.cuda.set_device(int(local_rank))
    torch.zeros(1, device="cuda")
elif os.environ.get("CUDA_VISIBLE_DEVICES") and torch is not None:
    # one process on every GPU it is given (the unit sets CUDA_VISIBLE_DEVICES)
    torch._sim.register_own_contexts()
    for i in range(torch.cuda.device_count()):
        torch.cuda.mem_get_info(i)
# the launcher's rank variables and the GPUs it was given (a restart hint must repeat them)
ranks = {
    k: os.environ[k]
    for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES")
    if k in os.environ
}


def setting(name, default):
    try:
        return float(open(os.path.join(ckpt, name)).read())
    except (OSError, ValueError):
        return default


def helper(parent):
    """A DataLoader worker: quiet exit on its parent's SIGTERM, death by anyone else's."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    while os.getppid() == parent:
        info = signal.sigtimedwait({signal.SIGTERM}, 1)
        if info is None:
            continue
        if info.si_pid == parent:
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGTERM)
    os._exit(0)  # the trainer is gone (torch's worker watchdog)


helpers = []
for _ in range(int(setting("helpers", 2))):
    child = os.fork()
    if child == 0:
        helper(pid)
    helpers.append(child)
ending_helpers = False


def helper_died(signum, frame):
    if ending_helpers:
        return
    for h in helpers:
        try:
            done, _status = os.waitpid(h, os.WNOHANG)
        except ChildProcessError:
            continue
        if done:
            raise RuntimeError(f"DataLoader worker (pid(s) {h}) exited unexpectedly")


stop = []
signal.signal(signal.SIGCHLD, helper_died)
signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
with open(os.path.join(ckpt, f"helpers-{pid}"), "w") as f:
    f.write("".join(f"{h}\\n" for h in helpers))
# written whole, then renamed into place: a test reads it while the trainer runs
with open(os.path.join(ckpt, f".started-{pid}.tmp"), "w") as f:
    f.write(f"{version} {sys.executable}\\n")
    f.write(json.dumps({"argv": sys.argv[1:], **ranks}) + "\\n")
os.replace(os.path.join(ckpt, f".started-{pid}.tmp"), os.path.join(ckpt, f"started-{pid}"))
while not stop:  # one step a second; SIGTERM is read at the step boundary
    time.sleep(1)
open(os.path.join(ckpt, f"stopping-{pid}"), "w").close()
time.sleep(setting("checkpoint_s", 0))
with open(os.path.join(ckpt, f"checkpoint-{pid}"), "w") as f:
    f.write("saved on SIGTERM\\n")
ending_helpers = True  # the DataLoader's shutdown: its parent's SIGTERM, then reaped
for h in helpers:
    try:
        os.kill(h, signal.SIGTERM)
        os.waitpid(h, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
sys.exit(0)
'''
