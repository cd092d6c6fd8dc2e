# Probe: the python env and training unit state of a training container, as one JSON line.
# Runs inside the container with its system python3 (stdlib only). ARGS is prepended:
# {"uv_bin": ..., "venvs_dir": ..., "venv_path": ..., "unit_path": ..., "unit_name": ...,
#  "cache_dir": ..., "started_path": ..., "python": ..., "uv_cache_dir": ..., "locks_cache": ...,
#  "baseline_path": ...}
#
# venvs: one entry per name in venvs_dir. A per-build link (torch-2.11.0-cu130 -> .b2) has "link"
# and, read through it, the fields of the real dir; a real dir (torch-2.11.0-cu130.b2, .next,
# .building) has "build" (its .pvegpu-build.json), "python_ok", "built" (the marker's mtime),
# "selected_at", "installed" ({name: version} from its dist-info METADATA), "locked" (the pins of
# its .pvegpu-lock.txt), "train_env" (the sha256 of its training settings file, .pvegpu-train.env)
# and "in_use" (pids whose maps, open files, cwd or argv[0] are inside it).
import json
import os

from pvegpu.probes.prelude import (  # sent as the prelude
    STARTED,
    digest,
    mtime,
    read,
    read_bytes,
    run,
    start_early,
)

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)
MARKER = ".pvegpu-build.json"
LOCK = ".pvegpu-lock.txt"
SELECTED = ".pvegpu-selected"
BUILD_ENV = ".pvegpu-train.env"  # pvegpu.plan.unit.BUILD_ENV
# First line of every training unit pvegpu renders (pvegpu.plan.unit.UNIT_MARKER).
UNIT_MARKER = "# Rendered by pvegpu from templates/training.service.j2"


def norm(name):
    out, sep = [], False
    for ch in name.lower():
        if ch in "-_.":
            sep = True
            continue
        if sep and out:
            out.append("-")
        sep = False
        out.append(ch)
    return "".join(out)


def installed(path):
    found = {}
    lib = os.path.join(path, "lib")
    try:
        pythons = [d for d in os.listdir(lib) if d.startswith("python")]
    except OSError:
        return found
    for py in pythons:
        site = os.path.join(lib, py, "site-packages")
        try:
            names = os.listdir(site)
        except OSError:
            continue
        for d in names:
            if not d.endswith(".dist-info"):
                continue
            name = version = None
            try:
                with open(os.path.join(site, d, "METADATA"), errors="replace") as f:
                    for line in f:
                        if line.startswith("Name:"):
                            name = line[5:].strip()
                        elif line.startswith("Version:"):
                            version = line[8:].strip()
                        elif not line.strip():
                            break
            except OSError:
                continue
            if name and version:
                found[norm(name)] = version
    return found


def pins(path):
    body = read(path)
    if body is None:
        return None
    found, line = {}, ""
    for raw in body.splitlines():
        raw = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        if raw.rstrip().endswith("\\"):
            line += raw.rstrip()[:-1] + " "
            continue
        line = (line + raw).strip()
        spec = line.split(" --", 1)[0].split(";", 1)[0].strip()
        line = ""
        if spec and not spec.startswith("-") and "==" in spec:
            name, _, version = spec.partition("==")
            found[norm(name.split("[")[0].strip())] = version.strip()
    return found


def users(root):
    """{real dir name under root: [pids]} of processes using files inside it."""
    prefix = os.path.realpath(root) + "/"
    found = {}

    def hit(pid, path):
        if path and path.startswith(prefix):
            found.setdefault(path[len(prefix) :].split("/", 1)[0], set()).add(pid)

    # this probe and the commands it started (they run while /proc is read)
    mine = {os.getpid(), *(p.pid for p in STARTED.values())}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    for pid in pids:
        if pid in mine:
            continue
        base = f"/proc/{pid}"
        for link in ("exe", "cwd"):
            try:
                hit(pid, os.readlink(f"{base}/{link}"))
            except OSError:
                pass
        try:
            # bytes, decoded as readlink and realpath decode a path: a file name that is not
            # UTF-8 neither raises here nor misses its match
            with open(f"{base}/maps", "rb") as f:
                for line in f:
                    parts = os.fsdecode(line).split(None, 5)
                    if len(parts) == 6:
                        hit(pid, parts[5].strip())
        except OSError:
            pass
        try:
            for fd in os.listdir(f"{base}/fd"):
                try:
                    hit(pid, os.readlink(f"{base}/fd/{fd}"))
                except OSError:
                    pass
        except OSError:
            pass
        argv0 = os.fsdecode((read_bytes(f"{base}/cmdline") or b"").split(b"\0", 1)[0])
        if argv0.startswith("/"):
            # the venv dir the interpreter was started from (bin/python links out of it)
            hit(pid, os.path.realpath(os.path.dirname(argv0)) + "/")
    return {k: sorted(v) for k, v in found.items()}


def real_entry(path, in_use):
    marker = os.path.join(path, MARKER)
    try:
        with open(marker) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        meta = None
    return {
        "path": path,
        "build": meta,
        "python_ok": os.access(os.path.join(path, "bin", "python"), os.X_OK),
        "built": mtime(marker),
        "selected_at": mtime(os.path.join(path, SELECTED)),
        "installed": installed(path),
        "locked": pins(os.path.join(path, LOCK)),
        "train_env": digest(os.path.join(path, BUILD_ENV)),
        "in_use": in_use,
    }


def venvs(root):
    found = {}
    if not os.path.isdir(root):
        return found
    using = users(root)
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.islink(path):
            target = os.readlink(path)
            entry = {"link": target}
            if os.path.isdir(path):
                real = os.path.realpath(path)
                entry.update(real_entry(real, using.get(os.path.basename(real), [])))
                entry["real"] = os.path.basename(real)
            found[name] = entry
        elif os.path.isdir(path):
            found[name] = real_entry(path, using.get(name, []))
    return found


def python_version_argv(interp):
    return [interp, "-c", "import platform; print(platform.python_version())"]


def python_info(interp):
    code, out, _ = run(python_version_argv(interp))
    return {"path": interp, "version": out.strip() if code == 0 else None}


def same_fs(a, b):
    def dev(p):
        while p and not os.path.exists(p):
            p = os.path.dirname(p)
        try:
            return os.stat(p or "/").st_dev
        except OSError:
            return None

    da, db = dev(a), dev(b)
    return None if da is None or db is None else da == db


def other_units(unit_path, unit_name):
    """{name: {"active", "enabled"}} of the other training units pvegpu rendered beside
    unit_path (an earlier training_unit_name): a renamed unit must not run beside the new one."""
    found = {}
    where = os.path.dirname(unit_path)
    try:
        names = sorted(os.listdir(where))
    except OSError:
        return found
    for name in names:
        path = os.path.join(where, name)
        if name == unit_name or not name.endswith(".service") or os.path.islink(path):
            continue
        if (read(path) or "").startswith(UNIT_MARKER):
            found[name] = {
                "active": run(["systemctl", "is-active", name])[1].strip() or None,
                "enabled": run(["systemctl", "is-enabled", name])[1].strip() or None,
            }
    return found


uv_bin = A["uv_bin"]
link = A["venv_path"]
unit = A.get("unit_name")
# the read-only commands below, started together: each one's start-up runs beside the others'
start_early(
    *([[uv_bin, "--version"]] if os.path.exists(uv_bin) else []),
    *([python_version_argv(A["python"])] if A.get("python") else []),
    *([["systemctl", "is-active", unit], ["systemctl", "is-enabled", unit]] if unit else []),
)
code, out, _ = run([uv_bin, "--version"]) if os.path.exists(uv_bin) else (127, "", "")
cache = A.get("cache_dir")
locks_cache = A.get("locks_cache")
doc = {
    "uv_version": out.split()[1] if code == 0 and len(out.split()) > 1 else None,
    "venvs": venvs(A["venvs_dir"]),
    "venv_link": os.readlink(link) if os.path.islink(link) else None,
    "venv_real": os.path.realpath(link) if os.path.islink(link) else None,
    "venv_path_is_dir": os.path.isdir(link) and not os.path.islink(link),
    "python": python_info(A["python"]) if A.get("python") else None,
    "uv_cache_same_fs": same_fs(A["uv_cache_dir"], A["venvs_dir"])
    if A.get("uv_cache_dir")
    else None,
    "resolved_locks": sorted(os.listdir(locks_cache))
    if locks_cache and os.path.isdir(locks_cache)
    else [],
    "unit_digest": digest(A["unit_path"]) if A.get("unit_path") else None,
    "unit_active": run(["systemctl", "is-active", unit])[1].strip() if unit else None,
    "unit_enabled": run(["systemctl", "is-enabled", unit])[1].strip() if unit else None,
    "other_units": other_units(A["unit_path"], unit) if A.get("unit_path") else {},
    # what the running training unit started with (its ExecStartPre writes it; see pvegpu.plan.unit)
    "unit_started": read(A["started_path"]) if A.get("started_path") else None,
    "cache_dir_exists": os.path.isdir(cache) if cache else None,
    # the apt package baseline recorded after creation (operations.rebuild.baseline_recorded)
    "baseline_exists": (
        os.path.isfile(A["baseline_path"]) and not os.path.islink(A["baseline_path"])
        if A.get("baseline_path")
        else None
    ),
    "compile_cache_dirs": (
        {sub: os.path.isdir(os.path.join(cache, sub)) for sub in ("inductor", "triton")}
        if cache
        else None
    ),
}
print(json.dumps(doc, sort_keys=True))
