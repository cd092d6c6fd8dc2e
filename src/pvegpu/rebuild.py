"""The pollution report printed before a rebuild: what differs from the lock and the baseline.

>>> lines = pollution_lines({"packages": {"torch": "2.11.0+cu128", "sglang-junk": "0.1.0"},
...                          "usr_local": ["/usr/local/bin/junk"], "apt_extras": []},
...                         {"torch": "2.11.0+cu130"}, locked=True)
>>> for line in lines: print(line)
venv: torch is 2.11.0+cu128, the lock says 2.11.0+cu130
venv: sglang-junk 0.1.0 is not in the lock
/usr/local: /usr/local/bin/junk was not placed by pvegpu
"""

from __future__ import annotations

import re
from pathlib import Path

from .settings import Settings

PROJECT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def expected_packages(settings: Settings, project: Path = PROJECT) -> tuple[dict[str, str], bool]:
    """``({name: version}, locked)``: the variant's lock when the project has one, else the pins."""
    lock = project / "locks" / f"{settings.torch_variant}.lock"
    if lock.exists():
        pins = {}
        for line in lock.read_text().splitlines():
            m = PIN.match(line.strip())
            if m:
                pins[normalize(m.group(1))] = m.group(2)
        return pins, True
    pins = {"torch": f"{settings.torch_version}+{settings.torch_variant}"}
    for req in settings.training_requirements:
        name, _, version = req.partition("==")
        pins[normalize(name.split("[")[0])] = version
    return pins, False


def pollution_lines(found: dict, expected: dict[str, str], locked: bool) -> list[str]:
    """One line per difference a rebuild would remove (empty: nothing to report)."""
    source = "the lock says" if locked else "the pins say"
    lines = []
    packages = found.get("packages")
    if packages is None:
        lines.append("venv: no live venv to inspect")
        packages = {}
    for name, version in sorted(expected.items()):
        have = packages.get(name)
        if have is None:
            lines.append(f"venv: {name} {version} is missing")
        elif have != version:
            lines.append(f"venv: {name} is {have}, {source} {version}")
    for name, version in sorted(packages.items()):
        if name not in expected:
            what = "is not in the lock" if locked else "is not pinned (a dependency, or a side install)"
            lines.append(f"venv: {name} {version} {what}")
    lines += [f"/usr/local: {path} was not placed by pvegpu" for path in found.get("usr_local") or []]
    lines += [f"apt: {pkg} was installed after the container was created" for pkg in found.get("apt_extras") or []]
    return lines
