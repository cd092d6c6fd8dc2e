"""Whose a container is, and what in it would start a training at boot: pure decisions over the
node read's entry for one container (its config and its own view).

pvegpu marks the containers it creates or adopts with the Proxmox tag ``pvegpu`` (the web UI shows
tags beside the name); a container without it was made by hand or by another tool and is changed
only with ``--data adopt=true``. A container an earlier pvegpu made before the tag existed is
known by ``/opt/pvegpu`` (pvegpu's own directory there) and gets the tag.

>>> is_ours({"config": {"tags": "ml;pvegpu"}}), is_ours({"config": {}, "live": {}})
(True, False)
>>> tags_with_ours("ml;gpu")
'ml;gpu;pvegpu'
"""

from __future__ import annotations

import re
import shlex

from .process_tree import LAUNCHERS, program, resolve
from .starts_training import runs_module, unit_runs_training

TAG = "pvegpu"


def tags_of(config: dict) -> list[str]:
    """A config's tags (``tags: a;b``; Proxmox also reads ``,`` and spaces between them)."""
    return [t for t in re.split(r"[;, ]+", str(config.get("tags") or "")) if t]


def is_ours(ct: dict) -> bool:
    """The container carries pvegpu's tag, or pvegpu's own directory from before the tag."""
    return TAG in tags_of(ct.get("config") or {}) or bool((ct.get("live") or {}).get("pvegpu_dir"))


def tags_with_ours(tags: str | None) -> str:
    """``tags`` with pvegpu's added (the value of `pct set --tags`), the others kept in order."""
    found = [t for t in re.split(r"[;, ]+", tags or "") if t]
    return ";".join([*found, TAG] if TAG not in found else found)


def cron_runs_training(line: str, match: dict) -> bool:
    """Whether a crontab line's command starts the training: the script (relative words from
    cron's cwd, $HOME=/root, or the directory a ``cd`` before it moved to), a launcher, or the
    configured training_command's module. A program that only lives under the venvs or the
    training dir (an upload, TensorBoard) starts none.

    >>> m = {"script": "/data/dflash/train.py", "paths": ["/data/dflash", "/root/venv"]}
    >>> cron_runs_training("@reboot cd /data/dflash && /root/venv/bin/python train.py", m)
    True
    >>> cron_runs_training("@reboot /root/venv/bin/python /data/dflash/upload.py", m)
    False
    """
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    cwd = "/root"
    for i, word in enumerate(words[1:], start=1):
        if words[i - 1] == "cd":
            cwd = resolve(word, cwd) or cwd
        elif program(word) in LAUNCHERS or resolve(word, cwd) == match.get("script"):
            return True
    return runs_module(words, match.get("module"))


def boot_starters(ct: dict, match: dict, unit: str) -> list[str]:
    """What would start a training when the container boots, besides pvegpu's unit: enabled
    units whose ExecStart runs one, enabled timers that trigger such a unit, ``@reboot`` cron
    lines that run one; one description each (pvegpu's own units, also under an earlier name,
    left out).

    >>> ct = {"live": {"units": [{"id": "t.service", "file_state": "enabled",
    ...       "exec": [["/root/venv/bin/python", "/d/t.py"]], "wd": None}], "crons": []}}
    >>> boot_starters(ct, {"script": "/d/t.py", "paths": []}, "dflash-train.service")
    ['t.service is enabled (/root/venv/bin/python /d/t.py)']
    """
    live = ct.get("live") or {}
    units = {u["id"]: u for u in live.get("units") or []}
    own = {unit, *(live.get("other_units") or {})}
    found = []
    for name, u in units.items():
        if name in own or u.get("file_state") != "enabled":
            continue
        if name.endswith(".service") and unit_runs_training(u, match):
            command = " ".join((u.get("exec") or [[]])[0])
            found.append(f"{name} is enabled ({command})")
        elif name.endswith(".timer"):
            runs = [t for t in u.get("triggers") or [] if t in units and t not in own]
            if any(unit_runs_training(units[t], match) for t in runs):
                found.append(f"{name} is enabled (it starts {', '.join(runs)})")
    for cron in live.get("crons") or []:
        if cron_runs_training(cron.get("line") or "", match):
            found.append(f"{cron['file']}: {cron['line']}")
    return found


def starter_names(ct: dict, match: dict, unit: str) -> tuple[list[str], list[dict]]:
    """(the units and timers, the cron entries) :func:`boot_starters` describes."""
    live = ct.get("live") or {}
    units, crons = [], []
    for line in boot_starters(ct, match, unit):
        name = line.split(" is enabled (", 1)[0]
        if " is enabled (" in line:
            units.append(name)
    for cron in live.get("crons") or []:
        if cron_runs_training(cron.get("line") or "", match):
            crons.append(cron)
    return units, crons


def disable_starters_script(units: list[str], crons: list[dict]) -> str:
    """A sh script for inside the container that disables what would start a training at boot:
    each unit or timer disabled and stopped in one `systemctl` call (never masked: the unit is
    the users', and `systemctl enable` gives it back); each ``@reboot`` cron line commented out
    in its file.

    >>> "systemctl disable --now t.service" in disable_starters_script(["t.service"], [])
    True
    """
    parts = ["set -e"]
    for name in units:
        q = shlex.quote(name)
        parts.append(f"systemctl disable --now {q}")
    for cron in crons:
        line, path = cron["line"], cron["file"]
        program_text = (
            "import sys\n"
            "p, want = sys.argv[1], sys.argv[2]\n"
            "text = open(p).read().split(chr(10))\n"
            "out = [('# disabled by pvegpu (it would start a second trainer at boot): ' + l)"
            " if l.strip() == want else l for l in text]\n"
            "open(p, 'w').write(chr(10).join(out))\n"
        )
        parts.append(
            f"python3 -c {shlex.quote(program_text)} {shlex.quote(path)} {shlex.quote(line)}"
        )
    return "\n".join(parts)


def storage_volumes(ct: dict) -> list[str]:
    """The container's storage-backed mount points (``mpN: <storage>:<volume>,mp=...``, not a
    bind mount of a node path): `pct destroy` deletes their volumes with the container.

    >>> config = {"mp0": "/tank/d,mp=/data", "mp1": "local-lvm:vm-200-disk-1,mp=/s"}
    >>> storage_volumes({"config": config})
    ['mp1 (local-lvm:vm-200-disk-1 at /s)']
    """
    found = []
    for key, value in sorted((ct.get("config") or {}).items()):
        if not re.fullmatch(r"mp\d+", key) or str(value).startswith("/"):
            continue
        volume, _, rest = str(value).partition(",")
        where = dict(p.split("=", 1) for p in rest.split(",") if "=" in p).get("mp", "?")
        found.append(f"{key} ({volume} at {where})")
    return found


def purge_lines(ct: dict, vmid) -> list[str]:
    """What `pct destroy --purge` takes along, one line each (the rebuild=container plan).

    >>> purge_lines({"purge": {"backup_jobs": ["backup-1"], "replication": [], "ha": True,
    ...              "firewall": True}}, 200)  # doctest: +NORMALIZE_WHITESPACE
    ['CT 200 is removed from backup job backup-1', 'CT 200 is removed from HA (ct: 200)',
     'its firewall rules /etc/pve/firewall/200.fw are deleted']
    """
    refs = ct.get("purge") or {}
    lines = [f"CT {vmid} is removed from backup job {j}" for j in refs.get("backup_jobs") or []]
    lines += [f"its replication job {r} is deleted" for r in refs.get("replication") or []]
    if refs.get("ha"):
        lines.append(f"CT {vmid} is removed from HA (ct: {vmid})")
    if refs.get("firewall"):
        lines.append(f"its firewall rules /etc/pve/firewall/{vmid}.fw are deleted")
    lines += [f"storage-backed {v} is destroyed" for v in storage_volumes(ct)]
    return lines
