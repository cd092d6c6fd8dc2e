# Runs INSIDE the venv's python (started as a subprocess by the torch_runtime and verification
# probes): what torch really sees, printed as one JSON line. Any failure is data, never a crash:
# an import error ends early with "import_error"; a CUDA init error is "init_error".
import json
import os
import sys
import warnings

doc: dict = {"import_error": None, "python_version": sys.version.split()[0]}
try:
    import torch
except Exception as e:  # noqa: BLE001 (a broken install is a fact to report)
    doc["import_error"] = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    print(json.dumps(doc))
    raise SystemExit(0) from None


def first_line(e):
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0] if text else type(e).__name__


doc["version"] = torch.__version__
doc["variant"] = torch.__version__.partition("+")[2] or None
doc["cuda"] = torch.version.cuda
# GPUs (UUIDs, no "GPU-", lower case; "*": all) a training holds: no CUDA context there
# (identity from cudaGetDeviceProperties, which needs none; free memory from nvidia-smi)
no_context = {u for u in os.environ.get("PVEGPU_NO_CONTEXT", "").split(",") if u}
# the GPUs that MAY take a context (None: any not in no_context): the verification probe's
# allowlist, so a GPU it did not name (unreported, unreadable) never gets one
context_ok = None
if "PVEGPU_CONTEXT_OK" in os.environ:
    context_ok = {u for u in os.environ["PVEGPU_CONTEXT_OK"].split(",") if u}
if os.environ.get("PVEGPU_CUDA_GATE") == "1":
    # started beside nvidia-smi (the verification probe): no CUDA call, so no context of this
    # process in its memory figures, before it has answered and the probe says go (JSON: the
    # GPUs to leave alone, the GPUs that may take one); no answer: no context anywhere
    go = sys.stdin.readline().strip()
    answer = json.loads(go) if go.startswith("{") else {"context_ok": []}
    no_context |= set(answer.get("no_context") or [])
    if answer.get("context_ok") is not None:
        context_ok = set(answer["context_ok"])


def short_uuid(uuid):
    text = str(uuid or "").strip().lower()
    return text[4:] if text.startswith("gpu-") else text


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        available = bool(torch.cuda.is_available())
    except Exception as e:  # noqa: BLE001
        available = False
        doc["init_error"] = first_line(e)
doc["available"] = available
# torch reports a CUDA init failure as a UserWarning "CUDA initialization: <reason> (Triggered
# internally at ...)" and is_available() -> False: keep the reason.
doc["warnings"] = [str(w.message).strip().splitlines()[0] for w in caught]
doc.setdefault("init_error", None)
doc["devices"] = []
doc["device_count"] = 0
doc["arch_list"] = []
if available:
    try:
        torch.cuda.init()
        # CUDA's own count (cudaGetDeviceCount): torch.cuda.device_count() asks NVML first, which
        # counts GPUs CUDA does not enumerate, and a properties call for one of those fails
        doc["device_count"] = torch._C._cuda_getDeviceCount()
        doc["arch_list"] = list(torch.cuda.get_arch_list())
    except Exception as e:  # noqa: BLE001
        doc["init_error"] = first_line(e)
    for i in range(doc["device_count"]):
        dev: dict = {"index": i}
        try:
            p = torch.cuda.get_device_properties(i)
            dev.update(
                {
                    "name": p.name,
                    "uuid": str(getattr(p, "uuid", "") or "") or None,
                    "total_mib": int(p.total_memory) // (1024 * 1024),
                    "capability": f"{p.major}.{p.minor}",
                    "sm_count": getattr(p, "multi_processor_count", None),
                }
            )
            u = short_uuid(dev["uuid"]) if dev["uuid"] else None
            if (
                "*" in no_context
                or u in no_context
                or (context_ok is not None and u not in context_ok)
            ):
                dev["context"] = False  # in use (or unknown): free memory from nvidia-smi
                dev["free_mib"] = None
            else:  # cudaMemGetInfo needs (makes) this process's context on the device
                free, total = torch.cuda.mem_get_info(i)
                dev["free_mib"] = int(free) // (1024 * 1024)
        except Exception as e:  # noqa: BLE001 (e.g. out of memory creating a context)
            dev["error"] = first_line(e)
        doc["devices"].append(dev)
else:
    for message in doc["warnings"]:
        if "CUDA initialization" in message or "driver" in message.lower():
            reason = message.split("CUDA initialization: ", 1)[-1]
            doc["init_error"] = doc["init_error"] or reason.split(" (Triggered internally")[0]
try:
    doc["cudnn"] = torch.backends.cudnn.version()
except Exception:  # noqa: BLE001
    doc["cudnn"] = None
try:
    doc["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
except Exception:  # noqa: BLE001
    doc["nccl"] = None
print(json.dumps(doc))
