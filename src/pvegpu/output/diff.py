"""What a change changes, as a person reads it: a file as a unified diff (old -> new), `pct set`
as each key old -> new, a venv build as the packages it installs or upgrades.

>>> print("\\n".join(file_diff("/etc/x.conf", "a\\nb\\n", "a\\nc\\n")))
--- /etc/x.conf
+++ /etc/x.conf (new)
@@ -1,2 +1,2 @@
 a
-b
+c
>>> pct_set_changes({"cores": "16", "dev0": "/dev/nvidia0"},
...                 ["--cores", "32", "--dev1", "/dev/nvidiactl", "--delete", "dev0"])
['cores: 16 -> 32', 'dev1: (none) -> /dev/nvidiactl', 'dev0: /dev/nvidia0 -> (deleted)']
>>> package_changes({"torch": "2.11.0+cu130", "six": "1.0"}, {"torch": "2.11.0+cu128", "a": "1"})
['a 1 (new)', 'torch 2.11.0+cu130 -> 2.11.0+cu128', 'six 1.0 (not in the new build)']
"""

from __future__ import annotations

import difflib


def file_diff(path: str, old: str | None, new: str) -> list[str]:
    """The unified diff of ``path`` from ``old`` (None: the file does not exist yet) to ``new``;
    empty when they are equal."""
    before = "/dev/null" if old is None else path
    return [
        line.rstrip("\n")
        for line in difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            before,
            f"{path} (new)",
        )
    ]


def pct_set_changes(config: dict, args: list[str], defaults: dict | None = None) -> list[str]:
    """``key: old -> new`` for each key `pct set` ``args`` (flag-value pairs; ``--delete`` a
    comma-separated key list) change in ``config`` (the container's main section; ``defaults``:
    what pct takes for a key the config does not name)."""
    defaults = defaults or {}
    lines = []
    for flag, value in zip(args[::2], args[1::2]):
        if flag == "--delete":
            lines += [f"{k}: {config.get(k, '(none)')} -> (deleted)" for k in value.split(",")]
            continue
        key = flag[2:]
        old = config.get(key, defaults.get(key, "(none)"))
        lines.append(f"{key}: {old} -> {value}")
    return lines


def package_changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """What a new venv build (``new``: {name: version}) installs against what the live venv has
    (``old``): new packages, changed versions, and packages the new build does not have."""
    lines = [f"{name} {new[name]} (new)" for name in sorted(set(new) - set(old))]
    lines += [
        f"{name} {old[name]} -> {new[name]}"
        for name in sorted(set(new) & set(old))
        if old[name] != new[name]
    ]
    lines += [f"{name} {old[name]} (not in the new build)" for name in sorted(set(old) - set(new))]
    return lines
