"""Speed at fleet scale (issue 22): N simulated nodes, M training containers each, one fleet file,
one pyinfra run per step.

    nice -n 10 uv run python bench/fleet.py [--nodes 1,4,16] [--containers 1,2] [--latency]
    nice -n 10 uv run python bench/fleet.py --quick

For each N (nodes) and M (containers per node): starts N simulated nodes, each on its own loopback
address (127.0.0.11, 127.0.0.12, ...: its sshd listens there; each has its own state directory,
so its containers, pct log and files are its own), seeds the training code, writes one fleet file
(M containers per node on disjoint GPUs: M=2 is CT 200 on GPUs 0-3 and CT 201 on 4-7), then runs,
each as one pyinfra run over the whole fleet:

- cold deploy (``deploy.py``), a converged no-op (``deploy.py`` again; the median of
  ``--rounds`` runs, 3 by default), verify-only (``verify.py``; likewise), a swap to the other
  built variant (``--data torch_variant=cu128``: builds it) and the swap back (the default
  variant, already built: checks plus a link flip). A fleet of more hosts (nodes and
  containers) than pyinfra's default ``--parallel`` (20 per CPU) also gets a no-op with
  ``--parallel`` set to its host count, as docs/dev/speed.md advises for a large fleet.

Per step: wall time, the controller's CPU (user + system of the pyinfra process, from
``os.wait4``: what a user's laptop pays; the simulated nodes' own processes are not its children,
so their CPU is not in it), and per node the SSH handshakes (pyinfra's ``--debug`` "Connecting
to: <address>"), node commands ("Running command on <node>") and ``pct exec`` calls (each node's
own pct log), and the rest of the machine's CPU meanwhile (/proc/stat's busy time less the
controller's: the simulated nodes, and whatever else the machine runs). Then the ratio of each
N's no-op to N = 1's (same M), the controller CPU per added node, and a last summary line.
``--latency``: the latency knob of bench/run.py (every ``pct`` call sleeps 0.4 s first, real
pct's Perl start-up; SSH through a loopback proxy adding 10 ms each way).
``--quick``: N = 1, 2 and M = 1, 2 (to try the bench itself). ``--profile DIR``: one more
no-op per N and M under cProfile (``DIR/noop-<N>x<M>.prof``; ``python -m pstats``).

Memory: every node boots a systemd container per training container (systemd-nspawn); the bench
measures the footprint of the first N > 1 (MemAvailable before and after its cold deploy) and
skips, with a line saying so, every larger N that would not fit in what is left; likewise for
inotify instances (each booted systemd holds several; root's are capped by
fs.inotify.max_user_instances, 128 by default: on this 2-core VM 16 nodes with 2 containers each
did not boot, "Failed to allocate manager object").
It asserts nothing. pyinfra's ``--parallel`` is left at its default (all hosts at once).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.__main__ import seed_training_code, site_data  # noqa: E402
from sim.fixtures_index import build_wheelhouse  # noqa: E402
from sim.index import PackageIndex  # noqa: E402
from sim.latency_proxy import LatencyProxy  # noqa: E402
from sim.node import SimNode  # noqa: E402

STEPS = ("cold deploy", "no-op", "no-op, --parallel all", "verify", "swap to cu128", "swap back")
#: pyinfra's default --parallel: 20 hosts per CPU (pyinfra.api.state), at most the host count
DEFAULT_PARALLEL = 20 * (os.cpu_count() or 1)
#: Training GPUs per container when a node has M containers (8 GPUs, disjoint sets).
GPU_SPLIT = {
    1: [(200, None)],
    2: [(200, ([0, 1, 2], [3])), (201, ([4, 5, 6], [7]))],
}
LATENCY = {"pct_startup_s": 0.4, "delay_s": 0.010}
FIRST_ADDRESS = 11  # 127.0.0.11, ...: away from the 127.0.0.1 most tests use


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (every core; /proc/stat's first line less
    idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def inotify_instances() -> int:
    """inotify instances open on the machine now (every booted systemd holds several; root's
    are capped at fs.inotify.max_user_instances, 128 by default)."""
    count = 0
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            count += sum(1 for fd in fd_dir.iterdir() if os.readlink(fd) == "anon_inode:inotify")
        except OSError:
            continue
    return count


def inotify_limit() -> int:
    return int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())


def mem_available_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 0


class RunFailed(Exception):
    """A pyinfra run of the bench failed: its first error lines."""


class Fleet:
    """N started nodes (behind latency proxies with --latency) and one fleet file for them."""

    def __init__(self, stack: ExitStack, workdir: Path, n: int, m: int, latency: bool):
        self.nodes: list[SimNode] = []
        entries = []
        for i in range(n):
            node = stack.enter_context(
                SimNode(
                    workdir / f"node{i}",
                    host=f"127.0.0.{FIRST_ADDRESS + i}",
                    pct_startup_s=LATENCY["pct_startup_s"] if latency else 0.0,
                )
            )
            seed_training_code(node)
            port, known = node.port, node.known_hosts_path
            if latency:  # the proxy listens on the node's own address, so names stay the same
                proxy = stack.enter_context(
                    LatencyProxy((node.host, node.port), LATENCY["delay_s"], host=node.host)
                )
                port, key = proxy.port, Path(known).read_text().split(None, 1)[1]
                known = str(workdir / f"known_hosts.{i}")
                Path(known).write_text(f"[{node.host}]:{port} {key}")
            self.nodes.append(node)
            entries.append(
                {
                    "address": node.host,
                    "ssh_port": port,
                    "ssh_key": node.key_path,
                    "ssh_known_hosts_file": known,
                    "containers": [
                        vmid
                        if gpus is None
                        else {"vmid": vmid, "target_gpus": gpus[0], "drafter_gpus": gpus[1]}
                        for vmid, gpus in GPU_SPLIT[m]
                    ],
                }
            )
        self.file = workdir / "fleet.yaml"
        self.file.write_text(yaml.safe_dump({"nodes": entries}))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_", "CT_ID"))}
        self.env["PVE_FLEET"] = str(self.file)

    def run(self, data: list[str], script: str, *extra: str, profile: Path | None = None) -> dict:
        """One pyinfra run: wall, controller CPU and per-node counts (``profile``: under cProfile,
        its stats written there)."""
        for node in self.nodes:
            node.clear_pct_log()
        python = [sys.executable, *(["-m", "cProfile", "-o", str(profile)] if profile else [])]
        argv = [
            *python,
            "-m",
            "pyinfra",
            "--debug",
            "inventory.py",
            script,
            "-y",
            *data,
            *[x for kv in extra for x in ("--data", kv)],
        ]
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            t0, busy0 = time.monotonic(), machine_busy_s()
            p = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdout=out, stderr=err, stdin=subprocess.DEVNULL
            )
            _, status, usage = os.wait4(p.pid, 0)
            wall, busy = time.monotonic() - t0, machine_busy_s() - busy0
            p.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            log = err.read()
        if p.returncode != 0:
            why = [
                line.strip()
                for line in log.splitlines()
                if re.search(r"did not boot|startup for container|timed out|[Ee]rror:", line)
                and "Error: executed" not in line
            ]
            fd, path = tempfile.mkstemp(prefix="pvegpu-fleet-failed-", suffix=".log")
            os.write(fd, log.encode())
            os.close(fd)
            raise RunFailed(
                f"{script} {' '.join(extra)} failed ({p.returncode}; its log: {path}): "
                + " | ".join(dict.fromkeys(why[:6]))
            )
        hosts = [n.host for n in self.nodes]
        shakes = re.findall(r"Connecting to: (\S+) \(", log)
        commands = re.findall(r"Running command on (?!@pct/)(\S+): ", log)
        execs = [sum(1 for c in n.pct_calls() if c["argv"][:1] == ["exec"]) for n in self.nodes]
        return {
            "wall": wall,
            "cpu": usage.ru_utime + usage.ru_stime,
            "rest": busy - (usage.ru_utime + usage.ru_stime),
            "handshakes": max(shakes.count(h) for h in hosts),
            "node_cmds": max(commands.count(h) for h in hosts),
            "pct_exec": max(execs),
        }


def median_run(runs: list[dict]) -> dict:
    """The run of median wall time (its CPU and counts with it), and how many were taken.

    >>> median_run([{"wall": 3.0}, {"wall": 1.0}, {"wall": 2.0}])
    {'wall': 2.0, 'samples': 3}
    """
    return {**sorted(runs, key=lambda r: r["wall"])[len(runs) // 2], "samples": len(runs)}


def measure(
    n: int, m: int, latency: bool, data_of, profile_dir=None, rounds: int = 3
) -> tuple[dict, tuple]:
    """{step: figures} for N nodes and M containers, and what the fleet took: (memory MiB,
    inotify instances); a no-op and verify-only: the median of ``rounds`` runs;
    ``profile_dir``: one more no-op, under cProfile (``noop-<N>x<M>.prof``)."""
    results = {}
    with tempfile.TemporaryDirectory(prefix=f"pvegpu-fleet-{n}x{m}-") as tmp, ExitStack() as stack:
        before, watches = mem_available_mib(), inotify_instances()
        fleet = Fleet(stack, Path(tmp), n, m, latency)
        data = data_of(Path(tmp))
        results["cold deploy"] = fleet.run(data, "deploy.py")
        used = (before - mem_available_mib(), inotify_instances() - watches)
        results["no-op"] = median_run([fleet.run(data, "deploy.py") for _ in range(rounds)])
        hosts = n * (1 + m)
        if hosts > DEFAULT_PARALLEL:  # what docs/dev/speed.md advises for such a fleet
            every = [*data, "--parallel", str(hosts)]
            results["no-op, --parallel all"] = median_run(
                [fleet.run(every, "deploy.py") for _ in range(rounds)]
            )
        if profile_dir:
            fleet.run(data, "deploy.py", profile=Path(profile_dir) / f"noop-{n}x{m}.prof")
        results["verify"] = median_run([fleet.run(data, "verify.py") for _ in range(rounds)])
        results["swap to cu128"] = fleet.run(data, "deploy.py", "torch_variant=cu128")
        results["swap back"] = fleet.run(data, "deploy.py")
    return results, used


def table(all_results: dict, latency: bool) -> list[str]:
    mode = "latency (pct start-up 0.4 s, SSH round trip 20 ms)" if latency else "plain"
    lines = [
        f"mode: {mode}",
        "",
        "| N | M | step | wall s | x N=1 | controller CPU s | rest of machine CPU s "
        "| handshakes/node | node cmds/node | pct exec/node |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (n, m), results in sorted(all_results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        base = all_results.get((1, m))
        for step in (s for s in STEPS if s in results):
            r = results[step]
            ratio = f"{r['wall'] / base[step]['wall']:.2f}" if base and step in base else "-"
            lines.append(
                f"| {n} | {m} | {step} | {r['wall']:.2f} | {ratio} | {r['cpu']:.2f} | "
                f"{r['rest']:.2f} | {r['handshakes']} | {r['node_cmds']} | "
                f"{r['pct_exec']} |"
            )
    return lines


def summary(all_results: dict) -> str:
    parts = []
    ms = sorted({m for _, m in all_results})
    for m in ms:
        ns = sorted(n for n, mm in all_results if mm == m)
        if 1 not in ns or len(ns) < 2:
            continue
        top, one = all_results[(ns[-1], m)]["no-op"], all_results[(1, m)]["no-op"]
        per_node = (top["cpu"] - one["cpu"]) / (ns[-1] - 1)
        parts.append(
            f"M={m}: no-op N={ns[-1]} {top['wall'] / one['wall']:.2f}x N=1 wall, "
            f"controller CPU +{per_node:.3f} s per added node"
        )
    for n in sorted({n for n, _ in all_results}):
        if (n, 1) in all_results and (n, 2) in all_results:
            two, one = all_results[(n, 2)]["no-op"], all_results[(n, 1)]["no-op"]
            parts.append(f"N={n}: 2 containers {two['wall'] / one['wall']:.2f}x 1 container")
    return "summary: " + ("; ".join(parts) or "one N and M only: no ratio")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/fleet.py", description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,4,16", help="node counts N (default 1,4,16)")
    ap.add_argument("--containers", default="1,2", help="containers per node M (default 1,2)")
    ap.add_argument("--latency", action="store_true", help="with bench/run.py's latency knob")
    ap.add_argument("--quick", action="store_true", help="N = 1, 2 only (try the bench)")
    ap.add_argument(
        "--rounds", type=int, default=3, help="no-op and verify runs per N and M, median (3)"
    )
    ap.add_argument(
        "--profile",
        metavar="DIR",
        help="also profile one more no-op per N and M (cProfile, into DIR)",
    )
    a = ap.parse_args(argv)
    nodes = [1, 2] if a.quick else sorted({int(x) for x in a.nodes.split(",")})
    counts = sorted({int(x) for x in a.containers.split(",")})
    if not set(counts) <= set(GPU_SPLIT):
        ap.error(f"--containers: only {sorted(GPU_SPLIT)} (8 GPUs, disjoint sets)")
    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
        f"{mem_available_mib()} MiB available at start",
        flush=True,
    )
    if a.profile:
        Path(a.profile).mkdir(parents=True, exist_ok=True)
    all_results: dict = {}
    per_node_mib: dict[int, float] = {}
    per_ct_inotify: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="pvegpu-fleet-wheels-") as wheels_dir:
        wheels = build_wheelhouse(Path(wheels_dir))
        with PackageIndex(wheels.torch_index(), wheels.pypi()) as index:

            def data_of(tmp: Path) -> list[str]:
                return [*site_data(index, tmp / "locks"), "--data", "training_requirements=[]"]

            for m in counts:
                for n in nodes:
                    need = per_node_mib.get(m, 0) * n
                    if need and need > 0.8 * mem_available_mib():
                        print(
                            f"N={n} M={m}: skipped: about {need:.0f} MiB needed "
                            f"({per_node_mib[m]:.0f} MiB per node measured), "
                            f"{mem_available_mib()} MiB available",
                            flush=True,
                        )
                        continue
                    # systemd cannot start in a container without inotify instances ("Failed
                    # to allocate manager object"): N x M booted containers must fit the limit
                    need = per_ct_inotify.get(m, 0) * n * m
                    free = inotify_limit() - inotify_instances()
                    if need and need > free:
                        print(
                            f"N={n} M={m}: skipped: {n * m} booted containers need about "
                            f"{need:.0f} inotify instances ({per_ct_inotify[m]:.1f} each "
                            f"measured), {free} are free (fs.inotify.max_user_instances="
                            f"{inotify_limit()}): raise it or run fewer",
                            flush=True,
                        )
                        continue
                    print(f"N={n} M={m}: running", file=sys.stderr, flush=True)
                    try:
                        all_results[(n, m)], used = measure(
                            n, m, a.latency, data_of, a.profile, a.rounds
                        )
                    except RunFailed as e:
                        print(f"N={n} M={m}: {e}", flush=True)
                        continue
                    if n > 1 and m not in per_node_mib:
                        per_node_mib[m] = max(used[0], 1) / n
                        per_ct_inotify[m] = max(used[1], 1) / (n * m)
                        print(
                            f"N={n} M={m}: the fleet took about {used[0]} MiB "
                            f"({per_node_mib[m]:.0f} MiB per node) and {used[1]} inotify "
                            f"instances ({per_ct_inotify[m]:.1f} per container)",
                            flush=True,
                        )
    print("\n".join(table(all_results, a.latency)))
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    print(summary(all_results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
