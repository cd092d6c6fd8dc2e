"""bench/gpu_reality.py's torchrun and DataLoader steps: what the torchrun unit's stop relies on,
run with the machine's python. ``r`` is gpu_reality's Run (its python, env, raw/ and work/).

- ``torchrun_options``: the installed launcher's ``--help`` (``--signals-to-handle``,
  ``--shutdown-timeout``), ``torch.__version__``, and where torch/distributed's source names
  ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` and ``os.killpg``;
- ``loader_signals``: a DataLoader(num_workers=2) trainer, SIGTERMed three ways: one of its
  DataLoader workers by this process (not its parent), its whole process group (what torchrun's
  forwarding does), the trainer alone (what the unit's stop does);
- ``held_launcher``: ``torchrun --standalone --nproc-per-node=1`` with an NCCL worker; the
  launcher held (SIGSTOP), the worker SIGTERMed: how long until it is out of
  ``destroy_process_group()``, with and without ``TORCH_NCCL_DUMP_ON_TIMEOUT=0``.

Every process started here is in a session of its own and ended by its pid or group before the
step returns; every wait has a timeout and the bench's budget bounds them all.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import time
from pathlib import Path

# the torch steps' environment and their JSON-line reader (bench/gpu_reality_torch.py, by path)
_spec = importlib.util.spec_from_file_location(
    "gpu_reality_torch", Path(__file__).with_name("gpu_reality_torch.py")
)
_torch_steps = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(_torch_steps)  # type: ignore[union-attr]
ORDER, last_json = _torch_steps.ORDER, _torch_steps.last_json
# seconds: for a script to be ready (torch's import, NCCL's init), for a trainer to end after its
# SIGTERM, for a worker to exit while its launcher is held, then after the launcher's release
# (each also bounded by the budget)
READY_S, END_S, HOLD_S, RELEASE_S = 30.0, 10.0, 10.0, 5.0

OPTIONS = r"""
import importlib.util, json, os, zipfile
import torch
root = os.path.dirname(torch.__file__)
archive = getattr(getattr(torch, "__loader__", None), "archive", None)  # a wheel on PYTHONPATH
def sources():
    if archive:
        with zipfile.ZipFile(archive) as z:
            for n in z.namelist():
                if n.startswith("torch/distributed/") and n.endswith(".py"):
                    yield n, z.read(n).decode("utf-8", "replace")
        return
    for d, _, files in os.walk(os.path.join(root, "distributed")):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(d, f)
                with open(p, errors="replace") as fh:
                    yield os.path.relpath(p, os.path.dirname(root)), fh.read()
found = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": [], "os.killpg": []}
for name, text in sources():
    for needle in found:
        if needle in text:
            found[needle].append(name)
print(json.dumps({"torch": torch.__version__, "found": {k: sorted(v) for k, v in found.items()},
                  "double": importlib.util.find_spec("torch._sim") is not None}))
"""
# Both scripts write their state, replaced whole, to the JSON file named by argv[1].
WRITE = r"""
import json, os, signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda s, f: stop.append(time.monotonic()))
out = {"pid": os.getpid()}
def write(**kw):
    out.update(kw)
    with open(sys.argv[1] + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
"""
LOADER = (
    WRITE
    + r"""
import torch
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self):
        return 1 << 20
    def __getitem__(self, i):
        time.sleep(0.01)
        return i
it = None
try:
    it = iter(DataLoader(Slow(), batch_size=4, num_workers=2))
    next(it)
    write(ready=True, workers=[w.pid for w in it._workers])
    t0 = time.monotonic()
    while not stop and time.monotonic() - t0 < 20:
        next(it)
    time.sleep(1.0)  # the checkpoint: a step boundary, then a write
    write(checkpoint=True)
    it._shutdown_workers()  # as the iterator's end does: the parent ends its workers
    write(exitcodes=[w.exitcode for w in it._workers])
except BaseException as e:
    codes = [w.exitcode for w in getattr(it, "_workers", [])]
    write(raised=f"{type(e).__name__}: {e}"[:300], exitcodes=codes)
    sys.exit(1)
"""
)
WORKER = (
    WRITE
    + r"""
import torch
import torch.distributed as dist
t0 = time.monotonic()
group = hasattr(dist, "init_process_group")  # the simulator's torch double has none
cuda = sys.argv[2] == "nccl"
try:
    if group:
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(sys.argv[2])
        x = torch.ones(1, device="cuda" if cuda else "cpu")
        dist.all_reduce(x)
        if cuda:
            torch.cuda.synchronize()
        write(all_reduce=float(x.item()))
    write(ready=True, process_group=group, start_s=round(time.monotonic() - t0, 2))
except Exception as e:
    write(error=f"{type(e).__name__}: {e}"[:300])
    sys.exit(3)
while not stop:
    time.sleep(0.05)
t1 = time.monotonic()
if group:
    dist.destroy_process_group()
write(destroy_s=round(time.monotonic() - t1, 2))
sys.exit(0)
"""
)


def read_state(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def wait_state(path: Path, proc: subprocess.Popen, timeout: float) -> dict:
    """The script's state once it is ready, failed or exited (or ``timeout`` passed)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = read_state(path)
        if state.get("ready") or state.get("error") or proc.poll() is not None:
            return state
        time.sleep(0.05)
    return read_state(path)


def proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from field 3 (state) on; None when the pid is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def wait_status(status: int) -> str:
    """A waitpid status (/proc/PID/stat field 52 of a zombie) in words.

    >>> wait_status(0), wait_status(3 << 8), wait_status(9)
    ('exit 0', 'exit 3', 'signal 9')
    """
    return f"exit {status >> 8}" if status & 0x7F == 0 else f"signal {status & 0x7F}"


def wait_exit(pid: int, start: str | None, timeout: float) -> tuple[float | None, str | None]:
    """Seconds until ``pid`` (of starttime ``start``) is a zombie or gone, and how it ended
    (a zombie's field 52; None once reaped); (None, None) if it still runs after ``timeout``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        fields = proc_stat(pid)
        if fields is None or fields[19] != start:
            return round(time.monotonic() - t0, 2), None
        if fields[0] in "ZX":
            status = wait_status(int(fields[49])) if len(fields) > 49 else None
            return round(time.monotonic() - t0, 2), status
        time.sleep(0.05)
    return None, None


def end_group(pgid: int) -> None:
    """SIGKILL what is left of a process group this step made (nothing left: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def end_children(pid: int) -> None:
    """SIGKILL the children of ``pid`` (a launcher this step started) and the process groups
    they lead: torchrun starts each worker in a session of its own, which its launcher's
    group does not hold. Their ppid is read just before, while ``pid`` still lives."""
    for entry in Path("/proc").iterdir():
        fields = proc_stat(int(entry.name)) if entry.name.isdigit() else None
        if fields and fields[1] == str(pid):
            end_group(int(entry.name))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def start(r, name: str, argv: list[str], env: dict) -> subprocess.Popen:
    """``argv`` in a session of its own, its output in raw/<name>.txt."""
    log = open(r.raw / f"{name}.txt", "w")  # noqa: SIM115 (the child writes it while it runs)
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    with log:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def torchrun_options(r) -> dict:
    """torch.__version__, the launcher's options, and where its source names the shutdown
    timeout's variable and os.killpg (the forwarding to each worker's process group)."""
    facts = r.sh("torchrun-source", [r.python, "-c", OPTIONS], 60, ORDER)
    out = last_json(facts)
    helped = r.sh("torchrun-help", [r.python, "-m", "torch.distributed.run", "--help"], 60, ORDER)
    out["help_rc"] = helped["rc"]
    out["help"] = helped["stdout"]
    return out


def loader_run(r, how: str, env: dict) -> dict:
    """One trainer with DataLoader workers, SIGTERMed ``how``: ``worker`` (its first DataLoader
    worker, by this process), ``group`` (its process group), ``trainer`` (itself alone)."""
    script, state = r.work / "loader.py", r.work / f"loader-{how}.json"
    script.write_text(LOADER)
    state.unlink(missing_ok=True)
    proc = start(r, f"loader-{how}", [r.python, str(script), str(state)], env)
    try:
        t0 = time.monotonic()
        got = wait_state(state, proc, max(1.0, min(READY_S, r.left() - 5)))
        if not got.get("ready"):
            return {"error": f"not ready: {got}", "ready_s": round(time.monotonic() - t0, 2)}
        if how == "worker":
            os.kill(got["workers"][0], signal.SIGTERM)
        elif how == "group":
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            os.kill(proc.pid, signal.SIGTERM)
        t1 = time.monotonic()
        try:
            rc = proc.wait(timeout=max(1.0, min(END_S, r.left() - 2)))
        except subprocess.TimeoutExpired:
            rc = None
        return {**read_state(state), "rc": rc, "end_s": round(time.monotonic() - t1, 2)}
    finally:
        end_group(proc.pid)
        proc.wait()


def loader_signals(r, options: dict) -> dict:
    """The DataLoader trainer SIGTERMed three ways (skipped without a real torch)."""
    if "error" in options or options.get("double"):
        why = options.get("error") or "the simulator's torch double has no torch.utils.data"
        return {"skipped": f"no real torch: {why}"}
    env = {**os.environ, **r.env, **ORDER}
    return {how: loader_run(r, how, env) for how in ("worker", "group", "trainer")}


def held_run(r, name: str, env: dict, backend: str) -> dict:
    """torchrun with one worker; the launcher held, the worker SIGTERMed; then the launcher
    SIGTERMed and let go (systemd's order: SIGTERM, then SIGCONT)."""
    script, state = r.work / "held_worker.py", r.work / f"held-{name}.json"
    script.write_text(WORKER)
    state.unlink(missing_ok=True)
    argv = [r.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1"]
    launcher = start(r, f"held-{name}", [*argv, str(script), str(state), backend], env)
    try:
        t0 = time.monotonic()
        got = wait_state(state, launcher, max(1.0, min(READY_S, r.left() - 5)))
        out: dict = {"ready_s": round(time.monotonic() - t0, 2), "worker": got}
        fields = proc_stat(got.get("pid", -1)) if got.get("ready") else None
        if not fields or fields[1] != str(launcher.pid):
            return {**out, "error": "no worker of the launcher ready"}
        worker, start_time = got["pid"], fields[19]
        os.kill(launcher.pid, signal.SIGSTOP)
        os.kill(worker, signal.SIGTERM)
        hold = max(1.0, min(HOLD_S, r.left() - 5))
        held, status = wait_exit(worker, start_time, hold)
        out.update(hold_s=hold, held_exit_s=held, exit_status=status)
        os.kill(launcher.pid, signal.SIGTERM)
        os.kill(launcher.pid, signal.SIGCONT)
        t1 = time.monotonic()
        if held is None:  # still in destroy_process_group: how long once the store answers
            out["released_exit_s"], _ = wait_exit(worker, start_time, RELEASE_S)
        try:
            out["launcher_rc"] = launcher.wait(timeout=RELEASE_S)
        except subprocess.TimeoutExpired:
            out["launcher_rc"] = None
        out["launcher_s"] = round(time.monotonic() - t1, 2)
        out["worker"] = read_state(state)
        return out
    finally:
        end_children(launcher.pid)  # a worker still running, ready or not
        end_group(launcher.pid)
        launcher.wait()


def held_launcher(r, gpu: bool, options: dict, backend: str = "nccl") -> dict:
    """The NCCL worker of a held torchrun, with the default environment and with
    TORCH_NCCL_DUMP_ON_TIMEOUT=0 (skipped without a GPU or without torch)."""
    if not gpu:
        return {"skipped": "no GPU: NCCL needs one"}
    if "error" in options:
        return {"skipped": f"no torch: {options['error']}"}
    base = {**os.environ, **r.env, **ORDER}
    base.pop("TORCH_NCCL_DUMP_ON_TIMEOUT", None)
    runs = {"default": base, "dump_off": {**base, "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}}
    return {name: held_run(r, name, env, backend) for name, env in runs.items()}
