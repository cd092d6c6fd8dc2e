"""torch.compile's toolchain: Triton builds a small C extension at its first CUDA kernel
(triton/runtime/build.py: ``$CC``, else gcc, else clang on PATH, and ``-I`` the venv's Python
headers), so the container needs a C compiler and ``Python.h`` whatever ``verify_level`` is: the
training compiles flex_attention.

>>> toolchain_text({"cc": "/usr/bin/gcc", "cc_version": "12.2.0",
...                 "python_include": "/usr/include/python3.11", "python_h": True})
'gcc 12.2.0, Python.h in /usr/include/python3.11'
"""

from __future__ import annotations

import os

from .inputs import Inputs
from .verdict import Problem, Verdict


def toolchain_text(tc: dict) -> str:
    """The toolchain fact in words (what the report's header shows)."""
    cc = os.path.basename(tc["cc"]) if tc.get("cc") else "no C compiler"
    version = f" {tc['cc_version']}" if tc.get("cc") and tc.get("cc_version") else ""
    include = tc.get("python_include") or "?"
    headers = f"Python.h in {include}" if tc.get("python_h") else f"no Python.h in {include}"
    return f"{cc}{version}, {headers}"


def check_toolchain(v: Verdict, f: Inputs) -> None:
    """The venv's container has a C compiler and its Python's headers (unread: no check)."""
    ct = f.ct or {}
    tc = ct.get("toolchain")
    if not ct.get("present") or not isinstance(tc, dict):
        return
    if tc.get("cc") and tc.get("python_h"):
        return
    v.problems.append(
        Problem(
            "torch.compile toolchain",
            "a C compiler (gcc or clang) and Python.h of the venv's Python, which Triton "
            "builds its C helper with at torch.compile's first CUDA kernel",
            toolchain_text(tc),
            f"run deploy.py (it installs gcc and the Python headers from CT {f.vmid}'s apt "
            "sources)",
        )
    )
