"""What a pyinfra run costs on the controller before its first remote command (issue 14).

    nice -n 10 uv run python bench/startup.py [--rounds N]

Medians (min-max) of N rounds, each in a fresh interpreter of this venv: Python itself, importing
pyinfra's CLI (what every run pays: gevent's monkey-patching, paramiko, click, jinja2 and
pyinfra's own modules), the part of that spent in gevent's plug-in look-ups (25 scans of every
installed package's entry points while it patches the stdlib), pvegpu's imports for verify.py
and for deploy.py on top of pyinfra, and one ``systemd-analyze verify`` of the training unit (the
settings check runs it when the unit's text or the tool changed since the last run; see
``pvegpu.plan.unit.verify_problems``). Without ``.pyc`` files (``PYTHONDONTWRITEBYTECODE=1`` and no
``uv sync --compile-bytecode``) every import row includes compiling. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERIFY = "import pvegpu.operations.checks"
DEPLOY = (
    "import pvegpu.startup.deploy_context, pvegpu.operations.checks, pvegpu.operations.python_env, "
    "pvegpu.operations.proxmox, pvegpu.operations.training, pvegpu.operations.rebuild"
)
SCANS = (
    "import time; from importlib import metadata; t = time.perf_counter()\n"
    "for _ in range(25): list(metadata.entry_points(group='gevent.plugins.monkey.will_patch'))\n"
    "print(time.perf_counter() - t)"
)
TIMED = "import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"


def in_fresh_python(code: str) -> float:
    """Seconds ``code`` takes in a new interpreter (as it prints them, or the whole run)."""
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return float(p.stdout.split()[-1]) if p.stdout.strip() else time.monotonic() - t0


def systemd_analyze() -> float:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return float("nan")
    from pvegpu.plan.unit import render_unit
    from pvegpu.settings import Settings, defaults

    with tempfile.TemporaryDirectory() as d:
        unit = Path(d) / "dflash-train.service"
        unit.write_text(render_unit(Settings.from_data(defaults())))
        t0 = time.monotonic()
        subprocess.run([tool, "verify", str(unit)], capture_output=True)
        return time.monotonic() - t0


ROWS = {
    "python -c pass": lambda: in_fresh_python("pass"),
    "import pyinfra_cli.main": lambda: in_fresh_python(
        TIMED.format(code="import pyinfra_cli.main")
    ),
    "  of which gevent's plug-in scans": lambda: in_fresh_python(SCANS),
    "pvegpu imports of verify.py": lambda: in_fresh_python(
        "import pyinfra_cli.main, pyinfra.api\n" + TIMED.format(code=VERIFY)
    ),
    "pvegpu imports of deploy.py": lambda: in_fresh_python(
        "import pyinfra_cli.main, pyinfra.api\n" + TIMED.format(code=DEPLOY)
    ),
    "systemd-analyze verify (unit)": systemd_analyze,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/startup.py", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    samples: dict[str, list[float]] = {k: [] for k in ROWS}
    start_load = os.getloadavg()[0]
    for _ in range(a.rounds):
        for name, measure in ROWS.items():
            samples[name].append(measure())
    print(
        f"{os.cpu_count()} CPUs, load average {start_load:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at end; bytecode written: {not sys.dont_write_bytecode}"
    )
    print("| what | median s | min-max s |\n|---|---|---|")
    for name, xs in samples.items():
        print(f"| {name} | {statistics.median(xs):.3f} | {min(xs):.3f}-{max(xs):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
