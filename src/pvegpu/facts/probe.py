"""Composite facts: one remote command runs a small Python probe that prints one JSON document.

On a real node every `pct exec` pays Perl start-up, and pyinfra runs one command per fact, so
each stage reads its whole state at once instead of through many small stock facts. The probe
source travels base64-encoded inside ``python3 -c``, so no quoting can break it and nothing is
written to the host.

>>> cmd = probe_command("node_state", {"vmids": [200]})
>>> cmd.startswith("python3 -c ")
True
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from importlib import resources

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError

#: A probe's import of the prelude's helpers (on one line, or parenthesized over several): for
#: readers and linters; the prelude itself is sent.
PRELUDE_IMPORT = re.compile(
    r"^from pvegpu\.probes\.prelude import (?:[\w, ]+|\([^)]*\)[ \t]*)(#.*)?\n", re.M
)
#: Probes that start with another probe file's functions (pvegpu is not installed where they run).
PRELUDES = {
    "node_state": ("ct_view", "ct_gate", "ct_processes", "node_site"),
    "verification": ("training_held",),
    "training_stop": ("ct_processes",),  # /proc/<pid>/stat read as the node probe reads it
}


def probe_source(name: str) -> str:
    """The probe's source as sent: the shared prelude (pvegpu/probes/prelude.py: ``run``,
    ``start_early``, ``read``, ``read_bytes``, ``proc_argv``, ``mtime``, ``digest`` ...) in
    front, in place of the probe's import of it, then its ``PRELUDES``; a probe that deletes
    (calls ``remove_tree``) also gets the delete guard's source (pvegpu/guard.py, plain Python),
    one that reaches an index (``site_urlopen``) pvegpu/netrules.py. pvegpu is not installed
    where probes run.

    >>> "def run(" in probe_source("pollution") and "import pvegpu" not in probe_source("pollution")
    True
    """
    probes = resources.files("pvegpu.probes")
    text = "\n".join(
        PRELUDE_IMPORT.sub("", probes.joinpath(f"{n}.py").read_text())
        for n in (*PRELUDES.get(name, ()), name)
    )
    if "remove_tree(" in text:
        text = resources.files("pvegpu").joinpath("guard.py").read_text() + "\n" + text
    if "site_urlopen(" in text:  # uv's proxy and CA rules (pvegpu/netrules.py, plain Python)
        text = resources.files("pvegpu").joinpath("netrules.py").read_text() + "\n" + text
    return probes.joinpath("prelude.py").read_text() + "\n" + text


def probe_command(name: str, args: dict, python: str = "python3") -> str:
    """The shell command running probe `name` with `args` under `python`."""
    source = f"ARGS = {json.dumps(args)!r}\n" + probe_source(name)
    payload = base64.b64encode(source.encode()).decode()
    code = f"import base64,json;exec(base64.b64decode('{payload}'))"
    return f"{shlex.quote(python)} -c {shlex.quote(code)}"


def parse_probe_output(name: str, lines: list[str]) -> dict:
    """The probe's JSON document (its last stdout line), strictly parsed."""
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as e:
                raise FactProcessError(f"{name}: probe printed invalid JSON ({e})") from None
            if not isinstance(doc, dict):
                raise FactProcessError(f"{name}: probe printed {type(doc).__name__}, not an object")
            return doc
    raise FactProcessError(f"{name}: probe printed no JSON document")


class ProbeFact(FactBase):
    """Base for composite facts; subclasses set ``probe`` and build ``args``. The default, an
    empty document, means the host could not be asked (e.g. a container not created yet)."""

    probe = ""
    python = "python3"

    def command_for(self, **args):
        """Subclasses define ``command(self, <named args>)`` (pyinfra binds fact arguments by
        name) and return ``self.command_for(**args)``."""
        return probe_command(self.probe, args, self.python)

    @staticmethod
    def default():
        return {}

    def process(self, output):
        return parse_probe_output(self.probe, list(output))
