"""Run the simulated Proxmox node by hand, or the demo.

    uv run python -m sim demo        # start node + loopback indexes, full deploy, verify, tear down
    uv run python -m sim up          # start them, print the environment to use, wait for Ctrl-C
    uv run python -m sim up --ct-init exec      # containers without init (no training unit)

Everything listens on 127.0.0.1 only and is torn down on exit.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

from sim.fixtures_index import build_wheelhouse
from sim.index import PackageIndex
from sim.node import SimNode

ROOT = Path(__file__).resolve().parents[1]


# The user's training code on the node's data dir (bind-mounted at /data in the container), as a
# real node has it before the first deploy; the unit's ExecStart names it. The containers' real
# systemd (the default) runs it: like a real trainer it takes a CUDA context on each GPU it is
# given (CUDA_VISIBLE_DEVICES: the unit sets it), listed by nvidia-smi while it lives, then trains
# until SIGTERM. A context it cannot get (a GPU busy or full) fails it at start, as torch would.
TRAIN_PY = (
    '"""Stand-in for the user\'s training script: takes its GPUs, runs until SIGTERM, exits 0."""\n'
    "import os\nimport signal\nimport sys\n\n"
    'print("train", *sys.argv[1:], flush=True)\n'
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    'if os.environ.get("CUDA_VISIBLE_DEVICES"):\n'
    "    import torch\n\n"
    "    torch._sim.register_own_contexts()  # the sim's stand-in: listed as a real trainer is\n"
    "    for i in range(torch.cuda.device_count()):\n"
    "        torch.cuda.mem_get_info(i)  # the CUDA context on GPU i\n"
    "while True:\n    signal.pause()\n"
)


def seed_training_code(node: SimNode, path: str = "/tank/dflash/dflash/train.py") -> None:
    node.run(["mkdir", "-p", path.rsplit("/", 1)[0]], check=True)
    node.run(["sh", "-c", f"cat > {path}"], input=TRAIN_PY, check=True)


@contextmanager
def simulated_site(workdir: Path, **node_options):
    """A started loopback package index and simulated node (with the user's training code); both
    always stopped."""
    wheels = build_wheelhouse(workdir / "wheels")
    with (
        PackageIndex(wheels.torch_index(), wheels.pypi()) as index,
        SimNode(workdir / "node", **node_options) as node,
    ):
        seed_training_code(node)
        yield node, index


def site_env(node: SimNode) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PVE_", "CT_ID"))}
    env.update(node.inventory_env())
    return env


def site_data(index: PackageIndex, locks_dir) -> list[str]:
    """--data overrides that point the deploy at the loopback indexes (and nothing else), and at
    a scratch ``locks_dir``: locks made against the loopback index never land in the repo's
    locks/. The watch of each start the deploy makes is 5 s (the stand-in trainer is up in well
    under a second; the default 60 s on every start would add minutes to the suite): a test
    about the watch sets its own."""
    return [
        "--data",
        "training_start_watch_s=5",
        "--data",
        f"torch_index_base={index.torch_index_base}",
        "--data",
        f"package_index_url={index.package_index_url}",
        "--data",
        f"locks_dir={locks_dir}",
    ]


def pyinfra_argv(script: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pyinfra", "inventory.py", script, *extra]


def demo(args) -> int:
    with tempfile.TemporaryDirectory(prefix="pvegpu-demo-") as tmp:
        print(
            "==> starting the simulated Proxmox node (127.0.0.1) and the loopback package indexes"
        )
        with simulated_site(Path(tmp), profile=args.profile, ct_init=args.ct_init) as (node, index):
            env = site_env(node)
            print(f"    node ssh 127.0.0.1:{node.port}, indexes {index.url}")
            steps = [
                ("deploy (node -> container -> venv -> verify -> unit)", "deploy.py", ["-y"]),
                ("second deploy: must report no changes", "deploy.py", ["-y"]),
                ("verify only", "verify.py", ["-y"]),
            ]
            for title, script, extra in steps:
                print(f"\n==> {title}: pyinfra inventory.py {script}")
                rc = subprocess.run(
                    pyinfra_argv(
                        script, *extra, *site_data(index, Path(tmp) / "locks"), *args.data_args
                    ),
                    cwd=ROOT,
                    env=env,
                ).returncode
                if rc != 0:
                    print(f"\n==> {script} failed (exit {rc})")
                    return rc
            check = node.ct_run(
                200,
                [
                    "/root/venv/bin/python",
                    "-c",
                    "import torch; print(torch.__version__, torch.version.cuda, "
                    "torch.cuda.is_available(), torch.cuda.device_count())",
                ],
            )
            print(f"\n==> inside CT 200: {check.stdout.strip()}")
            print("==> tearing down")
    return 0


def up(args) -> int:
    with (
        tempfile.TemporaryDirectory(prefix="pvegpu-sim-") as tmp,
        simulated_site(Path(tmp), profile=args.profile, ct_init=args.ct_init) as (node, index),
    ):
        env = node.inventory_env()
        # before the last line is out: a SIGTERM right after it must find this handler
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        print("# simulated node is up; in another shell:")
        for key, value in env.items():
            print(f"export {key}={value}")
        data = site_data(index, Path(tmp) / "locks")
        print(f"uv run pyinfra inventory.py deploy.py {' '.join(data)}")
        print("# Ctrl-C here tears it down", flush=True)
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="full deploy against the simulated node, then tear down")
    d.add_argument(
        "--data",
        dest="data",
        action="append",
        default=[],
        help="extra pyinfra --data key=value (e.g. torch_variant=cu128)",
    )
    u = sub.add_parser("up", help="start the simulated node and wait")
    for p in (d, u):
        p.add_argument(
            "--profile",
            default="pve8",
            choices=("pve8", "pve9"),
            help="Proxmox VE release the node plays (sim/README.md, Profiles)",
        )
        p.add_argument(
            "--ct-init",
            default=None,
            choices=("exec", "systemd"),
            help="containers: booting real systemd (systemd-nspawn; the default) "
            "or per-call exec without init (sim/README.md, Containers)",
        )
    args = parser.parse_args(argv)
    args.data_args = [x for kv in getattr(args, "data", []) for x in ("--data", kv)]
    return demo(args) if args.cmd == "demo" else up(args)


if __name__ == "__main__":
    sys.exit(main())
