# Probe: what in a training container differs from what pvegpu put there, as one JSON line.
# Runs inside the container with its system python3. ARGS is prepended:
# {"venv": "/root/venv", "python": "/root/venv/bin/python", "uv_bin": ..., "lock_file": ...,
#  "baseline": "/var/lib/pvegpu/baseline-packages", "usr_local_ours": ["/usr/local/bin/uv"]}
import json
import os

from pvegpu.probes.prelude import run  # sent as the prelude

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)


def venv_packages():
    if not os.path.exists(A["python"]):
        return None
    # --no-cache: a report must not write (uv caches interpreter info otherwise).
    code, out, _ = run(
        [A["uv_bin"], "pip", "list", "--no-cache", "--format", "json", "--python", A["python"]],
        timeout=300,
    )
    if code != 0:
        return None
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(out or "[]")}


def lock_text():
    """The exact pins the live venv was synced to (written by the python env stage)."""
    try:
        with open(os.path.join(os.path.realpath(A["venv"]), A["lock_file"])) as f:
            return f.read()
    except OSError:
        return None


def usr_local_files():
    found = []
    for root, dirs, files in os.walk("/usr/local"):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            if path not in A["usr_local_ours"]:
                found.append(path)
    return found


def apt_extras():
    try:
        with open(A["baseline"]) as f:
            baseline = set(f.read().split())
    except OSError:
        return None
    code, out, _ = run(["dpkg-query", "-W", "-f", "${Package}\\n"], timeout=300)
    return sorted(set(out.split()) - baseline) if code == 0 else None


print(
    json.dumps(
        {
            "packages": venv_packages(),
            "lock": lock_text(),
            "usr_local": usr_local_files(),
            "apt_extras": apt_extras(),
        },
        sort_keys=True,
    )
)
