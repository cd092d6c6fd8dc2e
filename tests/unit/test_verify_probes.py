"""The verification probes run for real on this machine: the exact remote command strings, with a
stub ``torch`` (import error, CUDA init error, two GPUs, the FX-tracing race) and a stub
``nvidia-smi``. The code paths are the ones that run on a real GPU node."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pvegpu.facts.probe import parse_probe_output, probe_command, probe_source
from pvegpu.facts.verification import shape

STUB = textwrap.dedent('''
    """A stub of the torch API the probes use. STUB_MODE: ok | noinit | race | fallback."""
    import os, sys, threading, time, types, warnings
    MODE = os.environ.get("STUB_MODE", "ok")
    __version__ = "2.11.0+cu130"
    version = types.SimpleNamespace(cuda="13.0")
    bfloat16 = "bfloat16"

    class device:
        def __init__(self, kind, index=None):
            self.type, self.index = kind, index

    def randn(*shape, device=None, dtype=None):
        return ("tensor", shape, device)

    class _Props:
        def __init__(self, i):
            self.name, self.major, self.minor = "NVIDIA H200", 9, 0
            self.uuid = f"5a1e{i}{i}{i}{i}-5157"
            self.total_memory = 143771 * 1024 * 1024
            self.multi_processor_count = 132

    def _is_available():
        if MODE == "noinit":
            warnings.warn("CUDA initialization: Found no NVIDIA driver on your system. "
                          "(Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:109.)")
            return False
        return True

    cuda = types.ModuleType("torch.cuda")
    cuda.is_available = _is_available
    cuda.init = lambda: None
    cuda.device_count = lambda: 2 if MODE != "noinit" else 0
    # cudaGetDeviceCount (torch.cuda.device_count() asks NVML first)
    _C = types.SimpleNamespace(_cuda_getDeviceCount=lambda: 2 if MODE != "noinit" else 0)
    cuda.get_arch_list = lambda: ["sm_80", "sm_90"]
    cuda.get_device_properties = _Props
    def _mem_get_info(i):  # makes a context on device i (recorded in $STUB_CALLS)
        if os.environ.get("STUB_CALLS"):
            with open(os.environ["STUB_CALLS"], "a") as f:
                f.write(f"{i}\\n")
        return (143771 - 100) * 1024 * 1024, 143771 * 1024 * 1024

    cuda.mem_get_info = _mem_get_info
    cuda.set_device = lambda i: None
    cuda.synchronize = lambda i=None: None
    cuda.nccl = types.SimpleNamespace(version=lambda: (2, 27, 7))
    backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 91300))

    _flag = {"on": False}
    _lock = threading.Lock()

    def compile(fn, **kw):
        state = {"done": False}
        def wrapped(*a, **k):
            if MODE == "race":
                with _lock:
                    if _flag["on"]:
                        raise RuntimeError("Detected that you are using FX to symbolically trace a "
                                           "dynamo-optimized function. This is not supported at "
                                           "the moment.")
                    mine = not state["done"]
                    _flag["on"] = mine or _flag["on"]
                if mine:
                    time.sleep(0.3)
                    state["done"] = True
                    _flag["on"] = False
            return fn(*a, compiled=MODE != "fallback", **k)
        return wrapped

    def _flex_attention(q, k, v, compiled=False):
        if not compiled:
            warnings.warn("flex_attention called without torch.compile() - this will use an "
                          "unfused implementation that materializes the full scores matrix")
        return q

    fa = types.ModuleType("torch.nn.attention.flex_attention")
    fa.flex_attention = _flex_attention
    nn = types.ModuleType("torch.nn"); attention = types.ModuleType("torch.nn.attention")
    nn.attention, attention.flex_attention = attention, fa
    sys.modules.update({"torch.cuda": cuda, "torch.nn": nn, "torch.nn.attention": attention,
                        "torch.nn.attention.flex_attention": fa})
''')

# Linux's limit on one argument (MAX_ARG_STRLEN).
MAX_ARG_STRLEN = 131072


@pytest.fixture
def stub(tmp_path):
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(STUB)
    return site


def run_inner(name, site, mode, args=None, pythonpath=True):
    env = {**os.environ, "STUB_MODE": mode}
    if pythonpath:
        env["PYTHONPATH"] = str(site)
    # as probes/verification.py starts them: the probe mark after `-c <source>`
    argv = [sys.executable, "-c", probe_source(name), "pvegpu-probe"]
    argv += [json.dumps(args)] if args else []
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_torch_inner_import_error(stub):
    doc = run_inner("torch_inner", stub, "ok", pythonpath=False)
    assert doc["import_error"].startswith("ModuleNotFoundError")


def test_torch_inner_cuda_init_error_is_data(stub):
    doc = run_inner("torch_inner", stub, "noinit")
    assert doc["available"] is False and doc["device_count"] == 0
    assert doc["init_error"] == "Found no NVIDIA driver on your system."


def test_torch_inner_two_gpus(stub):
    doc = run_inner("torch_inner", stub, "ok")
    assert (doc["version"], doc["variant"], doc["cuda"]) == ("2.11.0+cu130", "cu130", "13.0")
    assert doc["available"] and doc["device_count"] == 2 and doc["arch_list"] == ["sm_80", "sm_90"]
    assert doc["devices"][1] == {
        "index": 1,
        "name": "NVIDIA H200",
        "uuid": "5a1e1111-5157",
        "total_mib": 143771,
        "free_mib": 143671,
        "capability": "9.0",
        "sm_count": 132,
    }
    assert (doc["cudnn"], doc["nccl"]) == (91300, "2.27.7")


def test_compile_check_without_race(stub):
    doc = run_inner("compile_check", stub, "ok", {"gpus": None, "timeout": 30})
    assert doc["ok"] and not doc["race"] and doc["gpus"] == [0, 1]
    assert [t["ok"] for t in doc["threads"]] == [True, True] and doc["serial"] is None


def test_compile_check_detects_the_fx_race_and_tries_the_lock(stub):
    doc = run_inner("compile_check", stub, "race", {"gpus": None, "timeout": 30})
    assert doc["race"] and not doc["ok"]
    errors = [t["error"] for t in doc["threads"] if not t["ok"]]
    assert len(errors) == 1 and "FX to symbolically trace" in errors[0]
    assert doc["serial"]["ok"] is True


def test_compile_check_detects_a_fallback(stub):
    doc = run_inner("compile_check", stub, "fallback", {"gpus": [0], "timeout": 30})
    assert not doc["ok"] and doc["fallback"][0].startswith(
        "flex_attention called without torch.compile()"
    )


def test_verification_probe_end_to_end(stub, tmp_path):
    venv = tmp_path / "venvs" / "torch-2.11.0-cu130"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    meta = venv / "lib" / "python3.11" / "site-packages" / "torch-2.11.0+cu130.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu130\n"
        "Requires-Dist: filelock\n\nlong description: x\n"
    )
    (venv / ".pvegpu-build.json").write_text('{"torch": "2.11.0+cu130"}\n')
    link = tmp_path / "venv"
    os.symlink(venv, link)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$1" in --query-gpu=uuid,memory.used)\n'
        "  printf 'GPU-5A1E0000-5157, 0\\nGPU-5A1E1111-5157, 2\\n'; exit 0;;\n"
        "--query-compute-apps=*) exit 0;;\nesac\n"
        "echo 'No devices were found'\nexit 6\n"
    )
    smi.chmod(0o755)
    from pvegpu.facts.gpus import GPU_QUERY

    args = {
        "venv": str(link),
        "uv_bin": str(tmp_path / "no-uv"),
        "torch_inner": probe_source("torch_inner"),
        "compile_inner": probe_source("compile_check"),
        "compile_args": {"gpus": None, "timeout": 30},
        "smi_query": ",".join(GPU_QUERY),
        "timeout": 60,
    }
    env = {
        **os.environ,
        "PYTHONPATH": str(stub),
        "STUB_MODE": "race",
        "PATH": f"{bindir}:{os.environ['PATH']}",
    }
    command = probe_command("verification", args)
    if len(command) >= MAX_ARG_STRLEN:  # only under mutmut: guard.py then holds every mutant
        pytest.skip("probe command longer than Linux allows one argument (mutated guard.py)")
    p = subprocess.run(
        ["sh", "-c", command],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    doc = shape(parse_probe_output("verification", p.stdout.splitlines()))
    assert doc["present"] and doc["venv_real"] == str(venv)
    assert doc["torch"]["version"] == "2.11.0+cu130" and doc["torch"]["device_count"] == 2
    assert doc["packages"] == {"torch": {"version": "2.11.0+cu130", "requires": ["filelock"]}}
    assert doc["marker"] == {"torch": "2.11.0+cu130"} and doc["pip_check"] is None
    assert doc["gpus"] == [] and doc["gpu_error"].startswith("no GPUs found")
    assert doc["compile"]["race"] is True
    # the compile check's private cache is gone, nothing was written into the venv
    assert not list(venv.rglob("__pycache__"))
    assert not [n for n in os.listdir("/tmp") if n.startswith("pvegpu-compile-check-")]


def test_verification_probe_makes_no_context_on_a_gpu_anyone_uses(stub, tmp_path):
    """GPU 1 has memory in use (anyone's: memory.used is device-wide), GPU 0 a compute process of
    this container that holds no memory yet: torch makes no context on either (their figures
    from cudaGetDeviceProperties, free memory left to nvidia-smi) and the compile check refuses,
    whether or not a training of ours runs. Both idle: both get a context. nvidia-smi
    unreadable: none does."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    used, apps = tmp_path / "used", tmp_path / "apps"
    smi = bindir / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$1" in --query-gpu=uuid,memory.used)\n'
        f"  [ -s {used} ] || exit 9; cat {used}; exit 0;;\n"
        f"--query-compute-apps=*) cat {apps}; exit 0;;\nesac\n"
        "echo 'No devices were found'\nexit 6\n"
    )
    smi.chmod(0o755)
    state = tmp_path / "active"
    ctl = bindir / "systemctl"
    ctl.write_text(f"#!/bin/sh\ncat {state}\n")
    ctl.chmod(0o755)
    from pvegpu.facts.gpus import GPU_QUERY

    args = {
        "venv": str(venv),
        "torch_inner": probe_source("torch_inner"),
        "compile_inner": probe_source("compile_check"),
        "compile_args": {"gpus": None, "timeout": 30},
        "smi_query": ",".join(GPU_QUERY),
        "timeout": 60,
        "unit_name": "dflash-train.service",
        "training_matcher": {"script": "/data/t.py", "pythons": [], "python_under": []},
    }
    calls = tmp_path / "calls"

    def probe(active, used_text, apps_text=""):
        state.write_text(active + "\n")
        used.write_text(used_text)
        apps.write_text(apps_text)
        calls.write_text("")
        env = {
            **os.environ,
            "PYTHONPATH": str(stub),
            "STUB_MODE": "ok",
            "STUB_CALLS": str(calls),
            "PATH": f"{bindir}:{os.environ['PATH']}",
        }
        command = probe_command("verification", args)
        if len(command) >= MAX_ARG_STRLEN:  # only under mutmut (training_held.py instrumented)
            pytest.skip("probe command longer than Linux allows one argument (mutmut)")
        p = subprocess.run(
            ["sh", "-c", command],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
        return shape(parse_probe_output("verification", p.stdout.splitlines()))

    busy = "GPU-5A1E0000-5157, 3\nGPU-5A1E1111-5157, 140000\n"
    for active in ("active", "inactive"):
        doc = probe(active, busy, "GPU-5A1E0000-5157, 42\n")
        assert doc["beside_training"]["running"] is (active == "active")
        assert doc["beside_training"]["context_ok"] == []
        assert doc["beside_training"]["held_why"] == {
            "5a1e0000-5157": "compute process of this container (pid 42)",
            "5a1e1111-5157": "140000 MiB in use (another process, a neighbour container or the "
            "node)",
        }
        held = doc["torch"]["devices"][1]
        assert held["context"] is False and held["free_mib"] is None
        assert (held["name"], held["total_mib"]) == ("NVIDIA H200", 143771)
        assert calls.read_text().split() == []  # no context anywhere
        assert doc["compile"]["refused"].startswith("verify_level=compile: refused, 2 GPU(s)")

    doc = probe("active", busy)  # GPU 0 idle, no process there: it alone takes a context
    assert doc["beside_training"]["context_ok"] == ["5a1e0000-5157"]
    assert calls.read_text().split() == ["0"] and doc["torch"]["devices"][0]["free_mib"] == 143671

    doc = probe("inactive", "GPU-5A1E0000-5157, 0\nGPU-5A1E1111-5157, 1\n")
    assert doc["beside_training"]["held"] == [] and calls.read_text().split() == ["0", "1"]
    assert "context" not in doc["torch"]["devices"][1] and doc["compile"]["ok"]

    doc = probe("inactive", "")  # nvidia-smi fails: fail closed
    assert doc["beside_training"]["held"] == ["*"] and calls.read_text().split() == []
    assert doc["compile"]["refused"]
