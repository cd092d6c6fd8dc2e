# Probe: the python env and training unit state of a training container, as one JSON line.
# Runs inside the container with its system python3 (stdlib only). ARGS is prepended:
# {"uv_bin": ..., "venvs_dir": ..., "venv_path": ..., "unit_path": ..., "unit_name": ...,
#  "cache_dir": ..., "started_path": ...}
import hashlib
import json
import os
import subprocess

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)


def run(argv):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        return p.returncode, p.stdout.strip()
    except (FileNotFoundError, PermissionError):
        return 127, ""


def digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def mtime(path):
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return None


def text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def venvs(root):
    found = {}
    if not os.path.isdir(root):
        return found
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        marker = os.path.join(path, ".pvegpu-build.json")
        try:
            with open(marker) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            meta = None
        found[name] = {"path": path, "build": meta, "python_ok": os.access(
            os.path.join(path, "bin", "python"), os.X_OK), "built": mtime(marker)}
    return found


uv_bin = A["uv_bin"]
code, out = run([uv_bin, "--version"]) if os.path.exists(uv_bin) else (127, "")
link = A["venv_path"]
unit = A.get("unit_name")
doc = {
    "uv_version": out.split()[1] if code == 0 and len(out.split()) > 1 else None,
    "venvs": venvs(A["venvs_dir"]),
    "venv_link": os.readlink(link) if os.path.islink(link) else None,
    "venv_path_is_dir": os.path.isdir(link) and not os.path.islink(link),
    "unit_digest": digest(A["unit_path"]) if A.get("unit_path") else None,
    "unit_active": run(["systemctl", "is-active", unit])[1] if unit else None,
    "unit_enabled": run(["systemctl", "is-enabled", unit])[1] if unit else None,
    # what the running training unit started with (its ExecStartPre writes it; see pvegpu.unit)
    "unit_started": text(A["started_path"]) if A.get("started_path") else None,
    "cache_dir_exists": os.path.isdir(A["cache_dir"]) if A.get("cache_dir") else None,
}
print(json.dumps(doc, sort_keys=True))
