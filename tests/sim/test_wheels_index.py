"""The simulation's wheels, loopback package index and torch double, exercised with real uv/pip.

Fixtures wheelhouse and package_index come from sim.fixtures_index (tests/conftest.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
from uv import find_uv_bin

from sim.index import PackageIndex
from sim.torch_double.fake_tree import gpu_uuid, make_fake_nvidia_root
from sim.wheels import build_torch_wheels, build_wheel

UV = find_uv_bin()
FX_RACE = "Detected that you are using FX to symbolically trace a dynamo-optimized function"


def clean_env(**extra) -> dict[str, str]:
    """The environment minus anything that would redirect uv/pip or the double."""
    drop = ("UV_", "PIP_", "PVE_SIM_", "CUDA_VISIBLE", "TORCHINDUCTOR", "VIRTUAL_ENV", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        env.pop(key, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def run(cmd, env=None, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd], env=env or clean_env(), capture_output=True, text=True, timeout=300
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def get(url: str) -> tuple[int, str, dict]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url) as resp:
            return resp.status, resp.read().decode(errors="replace"), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace"), dict(err.headers)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


# wheels --------------------------------------------------------------------------------------


def test_wheel_has_metadata_and_a_correct_record(tmp_path):
    wheel = build_wheel(
        "My.Pkg", "1.2.3", {"my_pkg/__init__.py": "X = 1\n"}, tmp_path, requires=["dep>=1"]
    )
    assert wheel.name == "my_pkg-1.2.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read("my_pkg-1.2.3.dist-info/METADATA").decode()
        record = zf.read("my_pkg-1.2.3.dist-info/RECORD").decode().splitlines()
        assert "Name: My.Pkg" in meta and "Requires-Dist: dep>=1" in meta
        assert "Tag: py3-none-any" in zf.read("my_pkg-1.2.3.dist-info/WHEEL").decode()
        rows = dict((line.split(",")[0], line.split(",", 1)[1]) for line in record)
        assert set(rows) == set(names)
        for name in names:
            if name.endswith("RECORD"):
                assert rows[name] == ","
                continue
            data = zf.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert rows[name] == f"sha256={digest},{len(data)}"
    again = build_wheel(
        "My.Pkg", "1.2.3", {"my_pkg/__init__.py": "X = 1\n"}, tmp_path / "b", requires=["dep>=1"]
    )
    assert again.read_bytes() == wheel.read_bytes()  # reproducible: stable sha256 across builds


def test_torch_wheels_carry_their_build(wheelhouse):
    assert sorted(wheelhouse.torch) == ["cu128", "cu130", "unlabeled"]
    assert wheelhouse.torch["cu128"].name == "torch-2.11.0+cu128-py3-none-any.whl"
    assert wheelhouse.torch["unlabeled"].name == "torch-2.11.0-py3-none-any.whl"
    with zipfile.ZipFile(wheelhouse.torch["unlabeled"]) as zf:
        build = zf.read("torch/_build.py").decode()
    assert "VERSION = '2.11.0'" in build and "CUDA = '13.0'" in build
    assert "manylinux" in wheelhouse.uv.name and wheelhouse.uv_version in wheelhouse.uv.name


def test_unknown_variant_is_refused(tmp_path):
    with pytest.raises(ValueError, match="cu999"):
        build_torch_wheels(tmp_path, variants=("cu999",))


# the index -----------------------------------------------------------------------------------


def test_index_lists_projects_with_sha256_fragments(package_index, wheelhouse):
    status, body, headers = get(package_index.torch_index_base + "/cu130/torch/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    sha = hashlib.sha256(wheelhouse.torch["cu130"].read_bytes()).hexdigest()
    assert f"/files/whl/cu130/torch-2.11.0%2Bcu130-py3-none-any.whl#sha256={sha}" in body
    assert "cu128" not in body

    status, body, _ = get(package_index.package_index_url + "/")
    assert status == 200
    for project in ("torch", "transformers", "sglang-junk", "uv"):
        assert f'href="/simple/{project}/"' in body

    status, body, _ = get(package_index.package_index_url + "/uv/")
    sha = hashlib.sha256(wheelhouse.uv.read_bytes()).hexdigest()
    assert status == 200 and f"#sha256={sha}" in body

    status, body, _ = get(package_index.torch_index_base + "/cu128/")
    assert status == 200 and 'href="/whl/cu128/torch/"' in body
    assert get(package_index.torch_index_base + "/cu999/torch/")[0] == 404
    assert get(package_index.package_index_url + "/nothing-here/")[0] == 404


def test_index_redirects_to_normalized_names(package_index):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(package_index.package_index_url + "/SGLang_Junk/")
    assert err.value.code == 301
    assert err.value.headers["Location"] == "/simple/sglang-junk/"
    status, body, _ = get(package_index.package_index_url + "/SGLang_Junk")
    assert status == 200 and "sglang_junk-0.1.0-py3-none-any.whl" in body


def test_index_serves_files_and_records_requests(package_index, wheelhouse):
    status, body, _ = get(package_index.package_index_url + "/transformers/")
    href = body.split('href="')[1].split("#")[0]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(package_index.url + href) as resp:
        assert resp.read() == wheelhouse.simple["transformers"].read_bytes()
    req = urllib.request.Request(package_index.url + href, method="HEAD")
    with opener.open(req) as resp:
        assert (
            int(resp.headers["Content-Length"]) == wheelhouse.simple["transformers"].stat().st_size
        )
    assert package_index.requests == [
        ("GET", "/simple/transformers/"),
        ("GET", href),
        ("HEAD", href),
    ]
    assert package_index.downloads() == ["transformers-5.6.0-py3-none-any.whl"]
    package_index.clear_requests()
    assert package_index.requests == [] and package_index.downloads() == []


def test_index_modes(package_index):
    package_index.set_mode("empty")
    status, body, _ = get(package_index.package_index_url + "/")
    assert status == 200 and "href" not in body
    assert get(package_index.package_index_url + "/torch/")[0] == 404
    package_index.set_mode("error500")
    assert get(package_index.torch_index_base + "/cu130/torch/")[0] == 500
    package_index.set_mode("normal")
    assert get(package_index.torch_index_base + "/cu130/torch/")[0] == 200
    with pytest.raises(ValueError):
        package_index.set_mode("broken")


def test_stopped_index_refuses_connections(wheelhouse):
    index = PackageIndex(wheelhouse.torch_index(), wheelhouse.pypi())
    with index:
        port = int(index.url.rsplit(":", 1)[1])
        assert get(index.package_index_url + "/")[0] == 200
    index.stop()  # idempotent
    assert not index.running
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


# real installers against the loopback index --------------------------------------------------


def uv_install(venv: Path, *args, env=None):
    return run([UV, "pip", "install", "--python", venv / "bin/python", *args], env=env)


def test_uv_installs_the_torch_variant_from_the_loopback_mirror(package_index, tmp_path):
    env = clean_env(UV_CACHE_DIR=str(tmp_path / "uv-cache"), UV_PYTHON_DOWNLOADS="never")
    venv = tmp_path / "venv"
    run([UV, "venv", "--python", sys.executable, venv], env=env)
    uv_install(
        venv,
        "--index-url",
        package_index.package_index_url,
        "--index",
        package_index.torch_index_base + "/cu130",
        "--index-strategy",
        "first-index",
        "torch==2.11.0+cu130",
        env=env,
    )
    out = run(
        [venv / "bin/python", "-c", "import torch; print(torch.__version__, torch.version.cuda)"]
    )
    assert out.stdout.split() == ["2.11.0+cu130", "13.0"]
    assert package_index.downloads() == ["torch-2.11.0+cu130-py3-none-any.whl"]
    assert all(
        path.startswith(("/whl/cu130/", "/simple/", "/files/"))
        for _, path in package_index.requests
    )

    # PyPI-like mirror: the unlabeled torch==2.11.0 is the CUDA 13.0 build.
    plain = tmp_path / "plain"
    run([UV, "venv", "--python", sys.executable, plain], env=env)
    uv_install(plain, "--index-url", package_index.package_index_url, "torch==2.11.0", env=env)
    out = run(
        [plain / "bin/python", "-c", "import torch; print(torch.__version__, torch.version.cuda)"]
    )
    assert out.stdout.split() == ["2.11.0", "13.0"]


def test_pip_installs_the_real_uv_from_the_loopback_mirror(package_index, wheelhouse, tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])  # pip from ensurepip: offline
    run(
        [
            venv / "bin/python",
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-cache-dir",
            "--index-url",
            package_index.package_index_url,
            f"uv=={wheelhouse.uv_version}",
        ]
    )
    out = run([venv / "bin/uv", "--version"])
    assert out.stdout.split()[:2] == ["uv", wheelhouse.uv_version]
    assert package_index.downloads() == [wheelhouse.uv.name]


# the torch double, against a fake NVIDIA tree -------------------------------------------------

PROBE = r"""
import json, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import torch
    out = {"version": torch.__version__, "cuda": torch.version.cuda,
           "available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
           "arch": torch.cuda.get_arch_list(), "cudnn": torch.backends.cudnn.version(),
           "nccl": list(torch.cuda.nccl.version())}
out["warnings"] = sorted({str(w.message) for w in caught})
try:
    torch.cuda.init()
    out["init_error"] = None
except RuntimeError as e:
    out["init_error"] = str(e)
if out["available"]:
    out["devices"] = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out["devices"].append({"name": torch.cuda.get_device_name(i), "total": p.total_memory,
            "uuid": str(p.uuid), "cap": list(torch.cuda.get_device_capability(i)),
            "sms": p.multi_processor_count, "mem": list(torch.cuda.mem_get_info(i))})
print(json.dumps(out))
"""


def probe(wheel: Path, root: Path, **env) -> dict:
    proc = run(
        [sys.executable, "-c", PROBE],
        env=clean_env(PYTHONPATH=str(wheel), PVE_SIM_ROOT=str(root), **env),
    )
    return json.loads(proc.stdout)


def test_double_reports_devices_and_memory(wheelhouse, tmp_path):
    make_fake_nvidia_root(
        tmp_path, gpus=2, processes=[{"pid": 4242, "gpu": 1, "used_mib": 40000, "name": "python3"}]
    )
    out = probe(wheelhouse.torch["cu130"], tmp_path)
    assert (out["version"], out["cuda"], out["available"], out["count"]) == (
        "2.11.0+cu130",
        "13.0",
        True,
        2,
    )
    assert out["warnings"] == [] and out["init_error"] is None
    assert out["arch"][-2:] == ["sm_110", "sm_120"] and out["cudnn"] == 91300
    total = 143771 * 1024 * 1024
    d0, d1 = out["devices"]
    assert d0 == {
        "name": "NVIDIA H200",
        "total": total,
        "uuid": gpu_uuid(0)[4:],
        "cap": [9, 0],
        "sms": 132,
        "mem": [total, total],
    }
    assert d1["mem"] == [total - 40000 * 1024 * 1024, total]

    out = probe(wheelhouse.torch["cu130"], tmp_path, CUDA_VISIBLE_DEVICES="1")
    assert out["count"] == 1 and out["devices"][0]["uuid"] == gpu_uuid(1)[4:]
    out = probe(wheelhouse.torch["cu130"], tmp_path, CUDA_VISIBLE_DEVICES="")
    assert (out["available"], out["count"], out["warnings"]) == (False, 0, [])
    assert out["init_error"] == "No CUDA GPUs are available"


def test_double_reads_the_node_schema_and_proc_gpu_information(wheelhouse, tmp_path):
    """The simulated node's node.json gives a GPU count; the rest comes from /proc like real."""
    procs = [{"pid": 7, "gpu_index": 2, "used_mib": 1024, "name": "python3", "starttime": 1}]
    make_fake_nvidia_root(tmp_path, gpus=4, schema="node", device_minors=[2, 3], processes=procs)
    out = probe(wheelhouse.torch["cu130"], tmp_path)
    assert out["count"] == 2
    assert [d["uuid"] for d in out["devices"]] == [gpu_uuid(2)[4:], gpu_uuid(3)[4:]]
    total = 143771 * 1024 * 1024
    assert out["devices"][0]["mem"] == [total - 1024 * 1024 * 1024, total]
    assert out["devices"][1]["name"] == "NVIDIA H200" and out["devices"][1]["cap"] == [9, 0]


def test_double_sees_only_passed_through_devices(wheelhouse, tmp_path):
    make_fake_nvidia_root(tmp_path, gpus=8, device_minors=[5, 6, 7])
    out = probe(wheelhouse.torch["cu128"], tmp_path)
    assert out["count"] == 3 and out["arch"][-1] == "sm_120" and "sm_110" not in out["arch"]
    assert [d["uuid"] for d in out["devices"]] == [gpu_uuid(i)[4:] for i in (5, 6, 7)]

    make_fake_nvidia_root(tmp_path, gpus=8, device_minors=[])
    out = probe(wheelhouse.torch["cu128"], tmp_path)
    assert (out["available"], out["count"], out["warnings"], out["arch"]) == (False, 0, [], [])


# `count` is torch.cuda.device_count(): NVML's count whenever NVML starts (the driver is
# there and libnvidia-ml matches it), whatever CUDA says; 0 (cudaGetDeviceCount) otherwise
@pytest.mark.parametrize(
    ("variant", "tree", "expected", "count"),
    [
        (
            "cu130",
            {"driver": "570.133.20"},
            "The NVIDIA driver on your system is too old (found version 12080)",
            2,
        ),
        (
            "cu128",
            {"driver": "520.61.05"},
            "The NVIDIA driver on your system is too old (found version 11080)",
            2,
        ),
        (
            "cu130",
            {"libcuda": "580.82.07"},
            "Error 803: system has unsupported display driver / cuda driver combination",
            0,
        ),
        (
            "cu130",
            {"uvm": False},
            "CUDA unknown error - this may be due to an incorrectly set up environment",
            2,
        ),
        ("cu130", {"libcuda": None}, "Found no NVIDIA driver on your system", 0),
        ("cu128", {"ctl": False}, "Found no NVIDIA driver on your system", 0),
    ],
)
def test_double_fails_cuda_init_like_torch(wheelhouse, tmp_path, variant, tree, expected, count):
    make_fake_nvidia_root(tmp_path, **tree)
    out = probe(wheelhouse.torch[variant], tmp_path)
    assert (out["available"], out["count"], out["arch"]) == (False, count, [])
    [warning] = out["warnings"]
    assert warning.startswith("CUDA initialization: ") and expected in warning
    assert "(Triggered internally at" in warning
    assert out["init_error"].startswith(expected.split(" (")[0]) or expected in out["init_error"]


def test_cu128_runs_on_a_12x_driver_in_compatibility_mode(wheelhouse, tmp_path):
    make_fake_nvidia_root(tmp_path, driver="550.163.01")
    assert probe(wheelhouse.torch["cu128"], tmp_path)["available"] is True
    assert probe(wheelhouse.torch["cu130"], tmp_path)["available"] is False


COMPILE = r"""
import json, threading, warnings
warnings.simplefilter("ignore")
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

q = torch.randn(1, 4, 256, 64, device="cuda", dtype=torch.bfloat16)
mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, 256, 256, device="cuda")
compiled = torch.compile(flex_attention)
results = []

def work():
    try:
        results.append(list(compiled(q, q, q, block_mask=mask).shape))
    except RuntimeError as e:
        results.append(str(e))

first = threading.Thread(target=work)
first.start()
torch._dynamo.sim_tracing.wait()          # the first thread is tracing: start the others now
others = [threading.Thread(target=work) for _ in range(3)]
for t in others: t.start()
for t in [first, *others]: t.join()
print(json.dumps({"results": results, "stats": torch._dynamo.sim_stats}))
"""


def compile_run(wheel, root, cache) -> dict:
    env = clean_env(
        PYTHONPATH=str(wheel), PVE_SIM_ROOT=str(root), TORCHINDUCTOR_CACHE_DIR=str(cache)
    )
    return json.loads(run([sys.executable, "-c", COMPILE], env=env).stdout)


def test_concurrent_compile_races_under_cu128_only(wheelhouse, tmp_path):
    make_fake_nvidia_root(tmp_path / "root")
    out = compile_run(wheelhouse.torch["cu128"], tmp_path / "root", tmp_path / "cache128")
    errors = [r for r in out["results"] if isinstance(r, str)]
    assert len(errors) == 3 and all(FX_RACE in e for e in errors)
    assert [1, 4, 256, 64] in out["results"] and out["stats"]["traces"] == 1

    out = compile_run(wheelhouse.torch["cu130"], tmp_path / "root", tmp_path / "cache130")
    assert out["results"] == [[1, 4, 256, 64]] * 4
    assert out["stats"]["cache_misses"] == 1
    # the compile cache is kept: a second process hits it
    assert list((tmp_path / "cache130").rglob("entry.json"))
    again = compile_run(wheelhouse.torch["cu130"], tmp_path / "root", tmp_path / "cache130")
    assert again["stats"]["cache_hits"] == 1 and again["stats"]["cache_misses"] == 0


def test_compile_race_follows_the_sim_override(wheelhouse, tmp_path):
    make_fake_nvidia_root(tmp_path / "root", torch_json={"compile_race": True})
    out = compile_run(wheelhouse.torch["cu130"], tmp_path / "root", tmp_path / "c1")
    assert sum(isinstance(r, str) and FX_RACE in r for r in out["results"]) == 3
    make_fake_nvidia_root(tmp_path / "root", torch_json={"compile_race": False})
    out = compile_run(wheelhouse.torch["cu128"], tmp_path / "root", tmp_path / "c2")
    assert out["results"] == [[1, 4, 256, 64]] * 4


def test_tensors_on_cuda_need_a_working_cuda(wheelhouse, tmp_path):
    make_fake_nvidia_root(tmp_path, uvm=False)
    code = (
        "import torch\ntry:\n    torch.randn(2, device='cuda')\n"
        "except RuntimeError as e:\n    print('ERR', e)"
    )
    out = run(
        [sys.executable, "-c", code],
        env=clean_env(PYTHONPATH=str(wheelhouse.torch["cu130"]), PVE_SIM_ROOT=str(tmp_path)),
    )
    assert out.stdout.startswith("ERR CUDA unknown error")


def test_torch_index_hosts_stale_copies_of_torchs_dependencies(package_index):
    """Like download.pytorch.org/whl/<variant>: older filelock/typing-extensions than PyPI's."""
    status, body, _ = get(package_index.torch_index_base + "/cu130/filelock/")
    assert status == 200 and "filelock-3.13.1-py3-none-any.whl" in body and "3.20.0" not in body
    status, body, _ = get(package_index.package_index_url + "/filelock/")
    assert status == 200 and "filelock-3.20.0-py3-none-any.whl" in body and "3.13.1" not in body
    status, body, _ = get(package_index.torch_index_base + "/cu130/typing-extensions/")
    assert status == 200 and "typing_extensions-4.12.2-py3-none-any.whl" in body


def test_index_with_auth_refuses_without_basic_credentials(wheelhouse, tmp_path):
    with PackageIndex(wheelhouse.torch_index(), wheelhouse.pypi(), auth=("me", "tok")) as ix:
        status, _, headers = get(ix.package_index_url + "/")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic realm=")
        req = urllib.request.Request(ix.package_index_url + "/")
        req.add_header("Authorization", "Basic " + base64.b64encode(b"me:tok").decode())
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req) as resp:
            assert resp.status == 200
        assert ix.authorization_headers()[-1] == "Basic bWU6dG9r"


def test_a_swapped_wheel_is_served_with_its_new_hash(wheelhouse, tmp_path):
    one = build_wheel("swapme", "1.0", {"swapme.py": "A = 1\n"}, tmp_path / "a")
    two = build_wheel("swapme", "1.0", {"swapme.py": "A = 2\n"}, tmp_path / "b")
    with PackageIndex({}, [one]) as ix:
        before = get(ix.package_index_url + "/swapme/")[1]
        ix.add([two])
        after = get(ix.package_index_url + "/swapme/")[1]
    assert hashlib.sha256(one.read_bytes()).hexdigest() in before
    assert hashlib.sha256(two.read_bytes()).hexdigest() in after
