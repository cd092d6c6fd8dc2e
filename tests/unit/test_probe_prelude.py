"""One prelude for every probe (issue 13): the small run/read/mtime/digest helpers (and the /proc
byte readers: read_bytes, as_text, split_argv, proc_argv) are defined in
pvegpu/probes/prelude.py only, and pvegpu.facts.probe sends it in front of each probe."""

from __future__ import annotations

import ast
import base64
import json
import re
import subprocess
import sys
from importlib import resources

import pytest

from pvegpu.facts.probe import probe_command, probe_source

HELPERS = {"run", "read", "read_bytes", "as_text", "split_argv", "proc_argv", "mtime", "digest"}
PROBES = sorted(
    p.name[:-3]
    for p in resources.files("pvegpu.probes").iterdir()
    if p.name.endswith(".py") and p.name not in ("__init__.py", "prelude.py")
)


def top_level_functions(source: str) -> list[str]:
    return [n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]


@pytest.mark.parametrize("name", PROBES)
def test_a_probe_as_sent_has_the_helpers_once_and_needs_no_pvegpu(name):
    own = resources.files("pvegpu.probes").joinpath(f"{name}.py").read_text()
    assert not HELPERS & set(top_level_functions(own)), f"{name} redefines a prelude helper"
    sent = probe_source(name)
    functions = top_level_functions(sent)
    assert all(functions.count(h) == 1 for h in HELPERS), (name, functions)
    assert "pvegpu.probes.prelude" not in sent and "import pvegpu" not in sent, name


def test_the_prelude_helpers_run_in_a_sent_probe(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    code = (
        "print(json.dumps([run(['/nonexistent/tool']), run(['sh', '-c', 'echo out; exit 3']),"
        f" read({str(f)!r}), read('/nonexistent'), mtime('/nonexistent'), digest({str(f)!r})]))"
    )
    source = "import json\n" + probe_source("pollution").split("\nA = json.loads")[0] + "\n" + code
    p = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == [
        [127, "", "/nonexistent/tool: not found"],
        [3, "out\n", ""],
        "x",
        None,
        None,
        "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
    ]


def test_probe_command_sends_the_prelude_after_args():
    command = probe_command("pollution", {"x": 1})
    payload = re.search(r"b64decode\(\W*([A-Za-z0-9+/=]{40,})", command).group(1)
    source = base64.b64decode(payload).decode()
    assert source.startswith('ARGS = \'{"x": 1}\'\n"""Helpers every probe gets')
    assert source.index("def run(") < source.index("def venv_packages(")
