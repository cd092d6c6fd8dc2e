"""The pollution report printed before a rebuild: what differs from the lock and the baseline.

The venv is compared with the exact pins it was last synced to (its ``.pvegpu-lock.txt``, see
pvegpu.plan.venvs), with the same drift rules the python env stage repairs by; without that record,
with the pins the settings ask for.

>>> lines = pollution_lines({"packages": {"torch": "2.11.0+cu128", "sglang-junk": "0.1.0"},
...                          "lock": "torch==2.11.0+cu130\\n",
...                          "usr_local": ["/usr/local/bin/junk"], "apt_extras": []}, {})
>>> for line in lines: print(line)
venv: torch is 2.11.0+cu128, the lock says 2.11.0+cu130 (wrong variant: the cu128 build, not cu130)
venv: sglang-junk 0.1.0 is installed but not in the lock (extra)
/usr/local: /usr/local/bin/junk was not placed by pvegpu
"""

from __future__ import annotations

from ..locks import parse_pins
from .venvs import drift


def pollution_lines(found: dict, fallback_pins: dict[str, str]) -> list[str]:
    """One line per difference a rebuild would remove (empty: nothing to report).

    ``fallback_pins`` (pvegpu.locks.desired_pins) is used when the venv has no lock record.
    """
    lines = []
    packages = found.get("packages")
    if packages is None:
        lines.append("venv: no live venv to inspect")
    else:
        locked = parse_pins(found["lock"]) if found.get("lock") else fallback_pins
        lines += [f"venv: {line}" for line in drift(packages, locked).lines()]
    lines += [
        f"/usr/local: {path} was not placed by pvegpu" for path in found.get("usr_local") or []
    ]
    lines += [
        f"apt: {pkg} was installed after the container was created"
        for pkg in found.get("apt_extras") or []
    ]
    return lines
