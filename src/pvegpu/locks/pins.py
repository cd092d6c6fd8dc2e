"""The pins: what the settings ask a build's venv to hold, and what a requirements or lock text
pins.

>>> from pvegpu.settings import Settings, defaults
>>> s = Settings.from_data({**defaults(), "torch_variant": "cu128"})
>>> print(requirements_in(s), end="")
torch==2.11.0+cu128
transformers==5.6.0
>>> parse_pins("torch==2.11.0+cu130 \\\\\\n    --hash=sha256:ab\\n"
...            "    # via -r x.in\\nNumPy==2.3.0\\n")
{'torch': '2.11.0+cu130', 'numpy': '2.3.0'}
"""

from __future__ import annotations

import re

from ..settings import Settings, TorchSettings

PIN_LINE = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([A-Za-z0-9.+!_-]+)\s*(?:;.*)?$"
)


def normalize(name: str) -> str:
    """PEP 503 name normalisation.

    >>> normalize("Sglang_Junk")
    'sglang-junk'
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def _logical_lines(text: str) -> list[str]:
    """Requirement-file lines with comments dropped and backslash continuations joined."""
    out, current = [], ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        line = line.rstrip()
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            out.append(current.strip())
        current = ""
    if current.strip():
        out.append(current.strip())
    return out


def parse_pins(text: str) -> dict[str, str]:
    """``{normalized name: version}`` of every ``name==version`` line (hashes, options, comments
    and markers ignored)."""
    pins = {}
    for line in _logical_lines(text):
        if line.startswith("-"):
            continue
        spec = line.split(" --", 1)[0].strip()
        m = PIN_LINE.match(spec)
        if m:
            pins[normalize(m.group(1))] = m.group(2)
    return pins


def unhashed_pins(text: str) -> list[str]:
    """Names of lock entries that carry no ``--hash`` (``uv pip sync --require-hashes`` refuses
    them).

    >>> unhashed_pins("a==1 \\\\\\n    --hash=sha256:00\\nb==2\\n")
    ['b']
    """
    bad = []
    for line in _logical_lines(text):
        if line.startswith("-"):
            continue
        m = PIN_LINE.match(line.split(" --", 1)[0].strip())
        if m and "--hash=" not in line:
            bad.append(normalize(m.group(1)))
    return bad


def desired_pins(torch: TorchSettings) -> dict[str, str]:
    """The exact pins the torch settings ask for: torch with its full local label, then the
    stack."""
    pins = {"torch": f"{torch.version}+{torch.variant}"}
    for req in torch.requirements:
        name, _, version = req.partition("==")
        pins[normalize(name.split("[")[0])] = version
    return pins


def requirements_in(settings: Settings) -> str:
    """The ``.in`` text for the settings: ``torch==<version>+<variant>`` first, then the stack."""
    lines = [settings.torch.pin, *sorted(settings.torch.requirements, key=str.lower)]
    return "".join(f"{line}\n" for line in lines)


def constraints(settings: Settings) -> str:
    """A constraint every uv call carries: no dependency can pull another torch build."""
    return f"{settings.torch.pin}\n"


def desired_pins_list(settings: Settings) -> list[str]:
    return [line for line in requirements_in(settings).splitlines() if line]
