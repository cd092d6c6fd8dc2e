"""Benchmark of the python env stage on the simulated node: prints figures, asserts nothing.

    uv run python bench/python_env.py [--repeat N]

Scenarios, each a full `pyinfra inventory.py deploy.py -y` against the simulated node and the
loopback index (torch alone, training_requirements=[]):

- cold build        fresh node: container created, uv installed, cu130 venv built
- no-op run         the same again (DESIGN target: <= 12 container commands, 0 changes)
- swap to new       torch_variant=cu128, never built before (downloads its torch)
- swap back         torch_variant=cu130, built before, index server stopped (DESIGN target:
                    <= 6 container commands, no download)
- rebuild=venv      every build deleted, rebuilt offline from uv's cache (index stopped)

Columns: wall seconds, container commands (`pct exec` through the @pct connector), of which the
python env stage's composite state reads, all `pct exec` calls (also the node probe's looks into the
container), all pct calls on the node, wheels downloaded, changed operations.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.__main__ import pyinfra_argv, simulated_site, site_data, site_env  # noqa: E402


def probe_name(cmd: str) -> str | None:
    m = re.search(r"b64decode\('[\"']*([A-Za-z0-9+/=]+)", cmd)
    if not m:
        return None
    src = base64.b64decode(m.group(1) + "==").decode(errors="replace")
    line = next((ln for ln in src.splitlines() if ln.startswith("# ")), "")
    return line[2:]


def run(node, index, data, base):
    node.clear_pct_log()
    if index.running:
        index.clear_requests()
    argv = pyinfra_argv("deploy.py", "-y", "--json", *base)
    for kv in data:
        argv += ["--data", kv]
    t = time.monotonic()
    p = subprocess.run(argv, cwd=ROOT, env=site_env(node), capture_output=True, text=True)
    wall = time.monotonic() - t
    calls = node.pct_calls()
    ct = [c["argv"][-1] for c in calls if c["argv"][:2] == ["exec", "200"] and "env" in c["argv"]]
    execs = sum(1 for c in calls if c["argv"][:1] == ["exec"])
    state_reads = sum(1 for c in ct if (probe_name(c) or "").startswith("Probe: the python env"))
    try:
        changed = json.loads(p.stdout)["results"]["totals"]["success"]
    except (ValueError, KeyError):
        changed = "?"
    downloads = len(index.downloads()) if index.running else 0
    return {
        "rc": p.returncode,
        "wall": wall,
        "ct": len(ct),
        "state": state_reads,
        "exec": execs,
        "pct": len(calls),
        "downloads": downloads,
        "changed": changed,
        "tail": p.stderr[-2000:] if p.returncode else "",
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="run the whole sequence N times")
    args = ap.parse_args(argv)
    rows = []
    for _ in range(args.repeat):
        with (
            tempfile.TemporaryDirectory(prefix="pvegpu-bench-") as tmp,
            simulated_site(Path(tmp)) as (node, index),
        ):
            base = [*site_data(index, Path(tmp) / "locks"), "--data", "training_requirements=[]"]
            steps = [
                ("cold build", [], None),
                ("no-op run", [], None),
                ("swap to new (cu128)", ["torch_variant=cu128"], None),
                ("swap back (index stopped)", [], "stop"),
                ("rebuild=venv (offline)", ["rebuild=venv", "restart_training=true"], None),
            ]
            for name, data, action in steps:
                if action == "stop":
                    index.stop()
                r = run(node, index, data, base)
                rows.append((name, r))
                if r["rc"]:
                    print(f"{name}: failed (exit {r['rc']})\n{r['tail']}", file=sys.stderr)
                    break
    print(
        f"{'scenario':28} {'wall s':>7} {'ct cmds':>8} {'state':>6} {'exec':>5} {'pct':>5} "
        f"{'dl':>4} {'changed':>8}"
    )
    for name, r in rows:
        print(
            f"{name:28} {r['wall']:7.1f} {r['ct']:8} {r['state']:6} {r['exec']:5} {r['pct']:5} "
            f"{r['downloads']:4} {r['changed']!s:>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
