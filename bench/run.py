"""Speed of pvegpu's runs against the floor, on the simulated node: wall time and remote commands.

    nice -n 10 uv run python bench/run.py [--rounds N] [--cold-rounds M] [--only plain|latency]

Starts a loopback package index and a simulated node (training code seeded, a scratch locks_dir,
training_requirements=[]), converges it (that first deploy is a cold deploy's first sample), builds
both variants, then runs N interleaved rounds of:

- floor: the seed's own check, one ``ssh node "pct exec 200 -- /root/venv/bin/python -c '...'"``
  printing torch's version, CUDA version, CUDA availability and device count;
- pyinfra import: ``python -c "import pyinfra_cli.main"`` (pyinfra's own start-up);
- empty deploy: ``pyinfra inventory.py bench/empty_deploy.py -y`` (start-up, inventory, the
  node's and the container's connections; no fact, no operation);
- verify: ``pyinfra inventory.py verify.py -y``;
- no-op: ``pyinfra inventory.py deploy.py -y`` on the converged site;
- swap to: ``--data torch_variant=cu128`` (a build already there), and swap back (the default);

then N rounds of the floor and rebuild=venv (``--data rebuild=venv --data restart_training=true``;
last, as it deletes every other build), and M-1 more cold deploys, each on a fresh node (also
shown less its start watch: the ``pct exec`` that watches the trainer it started for
``training_start_watch_s``, 5 s on the test site, by design). Per
scenario: the median wall time with min and max, its ratio to the floor's median, and the remote
commands of its last sample: node commands (every command pyinfra runs over the node's SSH, as its
``--debug`` log names them, SFTP uploads included; container commands, logged under their ``@pct/``
host, are left out) and ``pct exec`` calls (the sim's pct log). pyinfra runs with ``--debug`` for
those counts, in every sample alike.

The whole thing runs twice: as the simulator is (plain), and with the latency knob (latency):
every ``pct`` call sleeps 0.4 s first (real pct's Perl start-up) and the SSH connection goes
through a loopback proxy that delays every chunk 10 ms each way (a 20 ms round trip). It asserts
nothing; it prints a table per mode, then where the time of the empty deploy, verify, the no-op, the
swap back and the cold deploy goes (``phases()``: medians), and the machine's load average at start
and end. Goals (issue
42): verify within 2.0x the floor, a no-op and a swap back within 2.5x, a cold deploy no slower
than 4.6 s (before the start watch existed: compare its row less the watch).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.__main__ import seed_training_code, site_data, site_env  # noqa: E402
from sim.fixtures_index import build_wheelhouse  # noqa: E402
from sim.index import PackageIndex  # noqa: E402
from sim.latency_proxy import LatencyProxy  # noqa: E402
from sim.node import SimNode  # noqa: E402

SEED_CHECK = (
    "import torch; print(torch.__version__, torch.version.cuda, "
    "torch.cuda.is_available(), torch.cuda.device_count())"
)
NODE_COMMAND = re.compile(r"Running command on (?!@pct/)\S+: |Attempting upload of ")
EMPTY_DEPLOY = ROOT / "bench" / "empty_deploy.py"
MODES = {
    "plain": {"pct_startup_s": 0.0, "delay_s": 0.0},
    "latency": {"pct_startup_s": 0.4, "delay_s": 0.010},
}
ORDER = [
    "floor",
    "pyinfra import",
    "empty deploy",
    "verify",
    "no-op",
    "swap to cu128",
    "swap back",
    "rebuild=venv",
    "cold deploy",
    "cold deploy less its watch",
]
# The start watch's script (pvegpu.plan.start_watch): a `pct exec` of the cold deploy that lasts
# training_start_watch_s (5 s on the test site) by design
WATCH = "NRestarts"


class Site:
    """A started node (optionally behind the latency proxy) and how to run things against it."""

    def __init__(self, node: SimNode, index: PackageIndex, tmp: Path, delay_s: float, stack):
        self.node, self.index = node, index
        self.env = site_env(node)
        self.port = node.port
        if delay_s:
            proxy = stack.enter_context(LatencyProxy((node.host, node.port), delay_s))
            self.port = proxy.port
            known = tmp / f"known_hosts.{proxy.port}"
            key = Path(node.known_hosts_path).read_text().split(None, 1)[1]
            known.write_text(f"[{node.host}]:{proxy.port} {key}")
            self.env.update(PVE_SSH_PORT=str(proxy.port), PVE_SSH_KNOWN_HOSTS=str(known))
        self.data = [*site_data(index, tmp / "locks"), "--data", "training_requirements=[]"]
        self.watched = 0.0  # seconds of the start watch in the last pyinfra run (its pct exec)
        self.phases: dict[str, float] = {}  # where the last pyinfra run's time went (phases())

    def floor(self) -> tuple[float, int, int]:
        """The seed's check: one SSH session, one pct exec."""
        argv = [
            "ssh",
            "-i",
            self.node.key_path,
            "-o",
            f"UserKnownHostsFile={self.env['PVE_SSH_KNOWN_HOSTS']}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "LogLevel=ERROR",
            "-p",
            str(self.port),
            f"root@{self.node.host}",
            f"pct exec 200 -- /root/venv/bin/python -c '{SEED_CHECK}'",
        ]
        self.node.clear_pct_log()
        t0 = time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        elapsed = time.monotonic() - t0
        if p.returncode != 0 or "True 8" not in p.stdout:
            raise SystemExit(f"floor check failed ({p.returncode}): {p.stdout}{p.stderr}")
        return elapsed, 1, self._pct_execs()

    def pyinfra(self, script: str, *data: str) -> tuple[float, int, int]:
        argv = [
            sys.executable,
            "-m",
            "pyinfra",
            "--debug",
            "inventory.py",
            script,
            "-y",
            *self.data,
            *[x for kv in data for x in ("--data", kv)],
        ]
        self.node.clear_pct_log()
        lines: list[tuple[float, str]] = []  # (seconds since start, stderr line)
        t0 = time.monotonic()
        p = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        reader = threading.Thread(target=stamped, args=(p.stderr, t0, lines), daemon=True)
        reader.start()
        p.stdout.read()  # type: ignore[union-attr]
        _, status, usage = os.wait4(p.pid, 0)
        elapsed = time.monotonic() - t0
        reader.join()
        stderr = "".join(line for _, line in lines)
        if status != 0:
            raise SystemExit(f"{script} {data} failed ({status}):\n{stderr[-4000:]}")
        calls = self.node.pct_calls()
        self.watched = sum(c.get("duration", 0.0) for c in calls if WATCH in " ".join(c["argv"]))
        self.phases = phases(lines, elapsed, calls, usage.ru_utime + usage.ru_stime)
        return elapsed, len(NODE_COMMAND.findall(stderr)), self._pct_execs()

    def pyinfra_import(self) -> tuple[float, int, int]:
        """pyinfra's own start-up: importing its CLI (what every run pays before any work)."""
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", "import pyinfra_cli.main"], check=True)
        return time.monotonic() - t0, 0, 0

    def _pct_execs(self) -> int:
        return sum(1 for c in self.node.pct_calls() if c["argv"][:1] == ["exec"])


def stamped(pipe, t0: float, into: list) -> None:
    """Each line of ``pipe`` with the seconds since ``t0`` it arrived at."""
    for line in pipe:
        into.append((time.monotonic() - t0, line))


PHASES = ["start-up", "connect", "load", "remote", "of it pct exec", "rest", "controller CPU"]


def phases(lines: list, wall: float, calls: list[dict], cpu: float) -> dict[str, float]:
    """Where one run's wall time went, from its ``--debug`` lines' arrival: start-up (the
    interpreter, pyinfra's CLI, the inventory: until "Connecting to hosts"), connect (the SSH
    connection: until "Loading:"), load (the deploy file until its first remote command), remote
    (from each remote command's line to the next line: the command's round trip, its remote work
    and the wait for its answer), of it the sim's ``pct exec`` calls (their own duration), rest
    (operations, results, exit); and the controller's CPU (user + system of the pyinfra
    process)."""

    def first(text: str) -> float:
        return next((t for t, line in lines if text in line), 0.0)

    connecting, loading = first("Connecting to hosts"), first("Loading: ")
    remote = 0.0
    for i, (t, line) in enumerate(lines):
        if NODE_COMMAND.search(line) or "Running command on @pct/" in line:
            remote += (lines[i + 1][0] if i + 1 < len(lines) else wall) - t
    first_remote = next(
        (t for t, line in lines if "Running command on" in line or NODE_COMMAND.search(line)),
        wall,
    )
    load = max(0.0, first_remote - loading) if loading else 0.0
    return {
        "start-up": connecting,
        "connect": max(0.0, loading - connecting),
        "load": load,
        "remote": remote,
        "of it pct exec": sum(c.get("duration", 0.0) for c in calls if c["argv"][:1] == ["exec"]),
        "rest": max(0.0, wall - loading - load - remote) if loading else 0.0,
        "controller CPU": cpu,
    }


def new_site(stack, workdir: Path, index, name: str, mode: dict) -> Site:
    node = stack.enter_context(SimNode(workdir / name, pct_startup_s=mode["pct_startup_s"]))
    seed_training_code(node)
    return Site(node, index, workdir / f"{name}-scratch", mode["delay_s"], stack)


def run_mode(name: str, mode: dict, index, rounds: int, cold_rounds: int) -> tuple[dict, dict]:
    samples: dict[str, list[tuple[float, int, int]]] = {k: [] for k in ORDER}
    spent: dict[str, list[dict[str, float]]] = {}  # {run: [its phases, per round]}
    with tempfile.TemporaryDirectory(prefix=f"pvegpu-bench-{name}-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        (workdir / "main-scratch").mkdir()
        site = new_site(stack, workdir, index, "main", mode)
        samples["cold deploy"].append(cold := site.pyinfra("deploy.py"))
        spent["cold deploy"] = [site.phases]
        samples["cold deploy less its watch"].append((cold[0] - site.watched, *cold[1:]))
        site.pyinfra("deploy.py", "torch_variant=cu128")  # both builds exist from here on
        site.pyinfra("deploy.py")
        for r in range(rounds):
            print(f"[{name}] round {r + 1}/{rounds}", file=sys.stderr, flush=True)
            samples["floor"].append(site.floor())
            samples["pyinfra import"].append(site.pyinfra_import())
            # pyinfra's start-up, the inventory and the connections (node, @pct), no operation
            samples["empty deploy"].append(site.pyinfra(str(EMPTY_DEPLOY)))
            spent.setdefault("empty deploy", []).append(site.phases)
            samples["verify"].append(site.pyinfra("verify.py"))
            spent.setdefault("verify", []).append(site.phases)
            samples["no-op"].append(site.pyinfra("deploy.py"))
            spent.setdefault("no-op", []).append(site.phases)
            samples["swap to cu128"].append(site.pyinfra("deploy.py", "torch_variant=cu128"))
            samples["swap back"].append(site.pyinfra("deploy.py"))
            spent.setdefault("swap back", []).append(site.phases)
        # rebuild=venv deletes every other build (the cu128 one too): its rounds come last
        for _ in range(rounds):
            samples["floor"].append(site.floor())
            # each sample restarts the trainer, and the unit allows training_restart_burst (5)
            # starts an hour, the deploy's included: the bench resets the count (systemd's
            # unit_reset_failed resets the start rate limit whatever the unit's state)
            site.node.ct_run(200, ["systemctl", "reset-failed", "dflash-train.service"])
            samples["rebuild=venv"].append(
                site.pyinfra("deploy.py", "rebuild=venv", "restart_training=true")
            )
        for c in range(1, cold_rounds):
            print(f"[{name}] cold deploy {c + 1}/{cold_rounds}", file=sys.stderr, flush=True)
            with ExitStack() as cold_stack:
                (workdir / f"cold{c}-scratch").mkdir()
                cold = new_site(cold_stack, workdir, index, f"cold{c}", mode)
                samples["cold deploy"].append(sample := cold.pyinfra("deploy.py"))
                spent["cold deploy"].append(cold.phases)
                samples["cold deploy less its watch"].append(
                    (sample[0] - cold.watched, *sample[1:])
                )
    return samples, spent


def phase_table(spent: dict) -> str:
    """Medians of each run's phases (``phases``), in seconds."""
    lines = [
        "| run | " + " | ".join(PHASES) + " |",
        "|---|" + "---|" * len(PHASES),
    ]
    for run, rows in spent.items():
        cells = [f"{statistics.median(r[k] for r in rows):.2f}" for k in PHASES]
        lines.append(f"| {run} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(name: str, mode: dict, samples: dict) -> str:
    floor = statistics.median(s[0] for s in samples["floor"])
    lines = [
        f"{name}: pct start-up {mode['pct_startup_s']} s, SSH round trip "
        f"{2 * mode['delay_s'] * 1000:.0f} ms",
        "",
        "| run | median s | min-max s | x floor | node cmds | pct exec | n |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in ORDER:
        xs = samples[key]
        if not xs:
            continue
        times = [x[0] for x in xs]
        med = statistics.median(times)
        lines.append(
            f"| {key} | {med:.2f} | {min(times):.2f}-{max(times):.2f} | "
            f"{med / floor:.1f} | {xs[-1][1]} | {xs[-1][2]} | {len(xs)} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument(
        "--cold-rounds", type=int, default=1, help="cold deploys, the converge included (default 1)"
    )
    ap.add_argument("--only", choices=sorted(MODES), help="run one mode only")
    a = ap.parse_args(argv)
    out = [f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start"]
    with tempfile.TemporaryDirectory(prefix="pvegpu-bench-wheels-") as wheels_dir:
        wheels = build_wheelhouse(Path(wheels_dir))
        with PackageIndex(wheels.torch_index(), wheels.pypi()) as index:
            for name, mode in MODES.items():
                if a.only and name != a.only:
                    continue
                samples, spent = run_mode(name, mode, index, a.rounds, a.cold_rounds)
                out.append(table(name, mode, samples))
                out.append(f"{name}: where the time goes (medians, s)\n\n{phase_table(spent)}")
                print("\n\n".join(out[-2:]), flush=True)
    out.append(f"load average {os.getloadavg()[0]:.1f} at end")
    print("\n\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
