# Runs INSIDE the venv's python (a subprocess of the verification probe) for
# verify_level=compile: compile flex_attention with torch.compile concurrently from one thread per
# GPU, as the trainer does, and report what happened as one JSON line. The same code runs on a
# real GPU; nothing here knows about the simulation.
#
# torch's FX-tracing flag (torch.fx._symbolic_trace._is_fx_tracing_flag) is process-global, so a
# thread entering a compiled function while another thread is tracing fails with
# "Detected that you are using FX to symbolically trace a dynamo-optimized function" (raised in
# torch/_dynamo/eval_frame.py). The known workarounds are one process per GPU, or compiling under
# a lock and warming each device in turn. When the concurrent phase fails, a second phase tries
# the second workaround (a fresh compiled function, one device at a time under a lock) so the
# report says whether it works here.
# argv[1] the probe mark (pvegpu-probe), argv[2] (JSON):
# {"gpus": [0, 1, ...] or null (all visible), "seq": 256, "timeout": 600}
import json
import sys
import threading
import time
import warnings

ARGS = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
RACE_MARK = "FX to symbolically trace a dynamo-optimized function"
FALLBACK_MARKS = (
    "without torch.compile",
    "falling back",
    "fallback",
    "recompile_limit",
    "cache_size_limit",
    "graph break",
)
out: dict = {
    "ok": False,
    "error": None,
    "race": False,
    "fallback": [],
    "threads": [],
    "gpus": [],
    "seconds": None,
    "serial": None,
}


def first_line(e):
    lines = f"{type(e).__name__}: {e}".strip().splitlines()
    # dynamo's BackendCompilerFailed reads "backend='inductor' raised:" + the cause on line 2
    # (e.g. Triton's "RuntimeError: Failed to find C compiler. ..."): keep both
    if len(lines) > 1 and lines[0].endswith("raised:"):
        return f"{lines[0]} {lines[1]}"
    return lines[0] if lines else type(e).__name__


try:
    import torch
    from torch.nn.attention.flex_attention import flex_attention
except Exception as e:  # noqa: BLE001
    out["error"] = "cannot import torch.compile / flex_attention: " + first_line(e)
    print(json.dumps(out))
    raise SystemExit(0) from None

seq = int(ARGS.get("seq") or 256)
gpus = ARGS.get("gpus")
if gpus is None:
    # cudaGetDeviceCount: torch.cuda.device_count() asks NVML first (GPUs CUDA may not have)
    gpus = list(range(torch._C._cuda_getDeviceCount())) if torch.cuda.is_available() else []
out["gpus"] = gpus
out["torch"] = torch.__version__
if not gpus:
    out["error"] = "no CUDA device visible to compile on"
    print(json.dumps(out))
    raise SystemExit(0)


def inputs(i):
    dev = torch.device("cuda", i)
    return [torch.randn(1, 4, seq, 64, device=dev, dtype=torch.bfloat16) for _ in range(3)]


def concurrent_phase():
    compiled = torch.compile(flex_attention, dynamic=False)  # one function, shared, as the trainer
    barrier = threading.Barrier(len(gpus))
    results = {}

    def work(i):
        r = {"gpu": i, "ok": False, "error": None, "seconds": None}
        try:
            torch.cuda.set_device(i)
            q, k, v = inputs(i)
            try:
                barrier.wait(timeout=ARGS.get("timeout", 600))
            except threading.BrokenBarrierError:
                pass
            t0 = time.perf_counter()
            try:
                compiled(q, k, v)
                torch.cuda.synchronize(i)
                r["ok"] = True
            finally:
                r["seconds"] = round(time.perf_counter() - t0, 3)
        except Exception as e:  # noqa: BLE001 (every failure is the fact we report)
            barrier.abort()
            r["error"] = first_line(e)
        results[i] = r

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in gpus]
    for t in threads:
        t.start()
    deadline = time.monotonic() + float(ARGS.get("timeout", 600))
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [
        results.get(
            i,
            {"gpu": i, "ok": False, "error": "did not finish before the timeout", "seconds": None},
        )
        for i in gpus
    ]


def serial_phase():
    """Workaround 2: compile under a lock, warming each device in turn."""
    compiled = torch.compile(flex_attention, dynamic=False)
    lock = threading.Lock()
    t0 = time.perf_counter()
    for i in gpus:
        try:
            with lock:
                torch.cuda.set_device(i)
                q, k, v = inputs(i)
                compiled(q, k, v)
                torch.cuda.synchronize(i)
        except Exception as e:  # noqa: BLE001
            return {
                "ok": False,
                "gpu": i,
                "error": first_line(e),
                "seconds": round(time.perf_counter() - t0, 3),
            }
    return {"ok": True, "seconds": round(time.perf_counter() - t0, 3)}


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    start = time.perf_counter()
    out["threads"] = concurrent_phase()
    out["seconds"] = round(time.perf_counter() - start, 3)
    seen = set()
    for w in caught:
        message = str(w.message).strip().splitlines()[0] if str(w.message).strip() else ""
        if message and message not in seen and any(m in message.lower() for m in FALLBACK_MARKS):
            seen.add(message)
            out["fallback"].append(message)
out["race"] = any(RACE_MARK in (t["error"] or "") for t in out["threads"])
out["ok"] = all(t["ok"] for t in out["threads"]) and not out["fallback"]
if not all(t["ok"] for t in out["threads"]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["serial"] = serial_phase()
print(json.dumps(out))
