"""What Triton does at torch.compile's first CUDA kernel: build a small C extension with the
system's C compiler against the Python headers (and load it).

Real Triton (triton-lang/triton ``python/triton/runtime/build.py`` ``_build``; called by
``triton/backends/nvidia/driver.py`` ``compile_module_from_src`` when ``CudaUtils`` starts):

- the compiler: ``$CC``, else ``gcc`` on PATH, else ``clang``; none: ``RuntimeError: Failed to
  find C compiler. Please specify via CC environment variable.``;
- the include dirs: the source's own dir and ``sysconfig.get_paths(scheme)["include"]`` (Debian's
  ``posix_local`` scheme read as ``posix_prefix``): in a venv, the base Python's headers
  (``/usr/include/python3.11`` on Debian 12: package libpython3.11-dev);
- the command: ``[cc, src, "-O3", "-shared", "-fPIC", "-o", so, -l..., -L..., -I...]`` through
  ``subprocess.check_call`` (a failing compiler: ``CalledProcessError``);
- the built module is kept in Triton's cache (``$TRITON_CACHE_DIR``, default ``~/.triton/cache``)
  under the sha256 of its source, so a later process loads it without compiling;
- every kernel it launches gets a launcher of its own, generated for the kernel's signature and
  compiled the same way when first used (``driver.py`` ``make_launcher``): a new input shape or
  dtype compiles at run time, long after the first compile, so the compiler must stay.

inductor wraps what its backend raises: ``torch._dynamo.exc.BackendCompilerFailed`` with
``backend='inductor' raised:\\n<Type>: <message>``. The double does all of this for real (the
containers of the simulation are real Debian trees); only the C source is smaller.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sysconfig
import tempfile
import threading

NAME = "cuda_utils"
SOURCE = """#include <Python.h>
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cuda_utils", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_cuda_utils(void) { return PyModule_Create(&module); }
"""

LAUNCHER = """#include <Python.h>
/* the launcher of one kernel signature: {signature} */
static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "__triton_launcher", NULL, -1, NULL}};
PyMODINIT_FUNC PyInit___triton_launcher(void) {{ return PyModule_Create(&module); }}
"""

_lock = threading.Lock()
_loaded: dict = {}


def find_compiler() -> str:
    """``$CC``, else gcc, else clang on PATH (build.py ``_build``)."""
    cc = os.environ.get("CC")
    if cc is None:
        clang = shutil.which("clang")
        gcc = shutil.which("gcc")
        cc = gcc if gcc is not None else clang
        if cc is None:
            raise RuntimeError(
                "Failed to find C compiler. Please specify via CC environment variable."
            )
    return cc


def python_include_dir() -> str:
    """The Python headers' directory Triton passes with -I."""
    scheme = sysconfig.get_default_scheme()
    if scheme == "posix_local":  # Debian's own scheme (build.py)
        scheme = "posix_prefix"
    return sysconfig.get_paths(scheme=scheme)["include"]


def build(name: str, src: str, srcdir: str) -> str:
    """Compile ``src`` into ``<srcdir>/<name><EXT_SUFFIX>`` as Triton's ``_build`` does."""
    so = os.path.join(srcdir, name + sysconfig.get_config_var("EXT_SUFFIX"))
    cc = find_compiler()
    cmd = [cc, src, "-O3", "-shared", "-fPIC", "-o", so, f"-I{srcdir}", f"-I{python_include_dir()}"]
    subprocess.check_call(cmd)
    return so


def cache_dir() -> str:
    return os.environ.get("TRITON_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".triton", "cache"
    )


def compile_module_from_src(src: str, name: str):
    """The C module ``name`` of ``src``: from Triton's cache, else compiled now (once a process)."""
    key = hashlib.sha256(src.encode()).hexdigest()
    with _lock:
        if key in _loaded:
            return _loaded[key]
        cached = os.path.join(cache_dir(), key, f"{name}.so")
        if not os.path.exists(cached):
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "main.c")
                with open(path, "w") as f:
                    f.write(src)
                so = build(name, path, tmp)
                os.makedirs(os.path.dirname(cached), exist_ok=True)
                part = f"{cached}.tmp{os.getpid()}"
                shutil.copyfile(so, part)
                os.replace(part, cached)
        spec = importlib.util.spec_from_file_location(name, cached)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded[key] = module
        return module


def cuda_utils():
    """The driver's C helper module (CudaUtils)."""
    return compile_module_from_src(SOURCE, NAME)


def launcher(signature: str):
    """The launcher of a kernel of ``signature`` (CudaLauncher: make_launcher's source)."""
    return compile_module_from_src(LAUNCHER.format(signature=signature), "__triton_launcher")
