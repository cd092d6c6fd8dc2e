"""``torchrun`` / ``python -m torch.distributed.run`` double: torch's own argument grammar and
defaults, one node.

``--nproc-per-node`` (or ``--nproc_per_node``: every option takes both spellings; default ``1``;
``gpu``, ``cpu``, ``auto`` or a number), ``--standalone`` (rendezvous ``c10d`` at
``localhost:0``, a fresh ``--rdzv-id``), ``--rdzv-backend`` (``static``), ``--rdzv-endpoint``,
``--max-restarts`` (``0``), ``--monitor-interval`` (``0.1``), ``--master-addr`` (``127.0.0.1``),
``--master-port`` (``29500``), ``-m``/``--module``, ``--no-python``, ``--signals-to-handle``,
from torch 2.12 ``--shutdown-timeout`` (none: its environment variable, else 30);
an option's default can come from ``PET_<OPTION>`` in the environment. Each worker runs
``sys.executable -u <script> <args>`` (``-u -m <module>`` with ``-m``; the script itself with
``--no-python``). More than one worker sets ``OMP_NUM_THREADS=1`` unless it is set.

Source: pytorch/pytorch torch/distributed/run.py (get_args_parser, config_from_args, run),
torch/distributed/argparse_util.py (env, check_env); setup.py's console script
``torchrun = torch.distributed.run:main``.
"""

from __future__ import annotations

import os
import sys
import uuid
from argparse import REMAINDER, Action, ArgumentParser

import torch

from .elastic.multiprocessing.api import DEFAULT_SIGNALS, configure_logging, logger
from .launcher.api import LaunchConfig, elastic_launch, has_shutdown_timeout


class env(Action):  # noqa: N801 (torch's name)
    """An option whose default may come from ``PET_<DEST>``."""

    def __init__(self, dest, default=None, required=False, **kwargs) -> None:
        default = os.environ.get(f"PET_{dest.upper()}", default)
        super().__init__(dest=dest, default=default, required=required and not default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


class check_env(Action):  # noqa: N801 (torch's name)
    """A flag whose default may come from ``PET_<DEST>`` (``0``/``1``)."""

    def __init__(self, dest, default=False, **kwargs) -> None:
        default = bool(int(os.environ.get(f"PET_{dest.upper()}", "1" if default else "0")))
        super().__init__(dest=dest, const=True, default=default, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const)


# (flags, type, default) of the options taking a value, as torch declares them.
_VALUED = (
    (("--nnodes",), str, "1:1"),
    (("--nproc-per-node", "--nproc_per_node"), str, "1"),
    (("--rdzv-backend", "--rdzv_backend"), str, "static"),
    (("--rdzv-endpoint", "--rdzv_endpoint"), str, ""),
    (("--rdzv-id", "--rdzv_id"), str, "none"),
    (("--rdzv-conf", "--rdzv_conf"), str, ""),
    (("--max-restarts", "--max_restarts"), int, 0),
    (("--monitor-interval", "--monitor_interval"), float, 0.1),
    (("--start-method", "--start_method"), str, "spawn"),
    (("--role",), str, "default"),
    (("--log-dir", "--log_dir"), str, None),
    (("-r", "--redirects"), str, "0"),
    (("-t", "--tee"), str, "0"),
    (("--local-ranks-filter", "--local_ranks_filter"), str, ""),
    (("--node-rank", "--node_rank"), int, 0),
    (("--master-addr", "--master_addr"), str, "127.0.0.1"),
    (("--master-port", "--master_port"), int, 29500),
    (("--local-addr", "--local_addr"), str, None),
    (("--signals-to-handle", "--signals_to_handle"), str, DEFAULT_SIGNALS),
)
_FLAGS = (("--standalone",), ("-m", "--module"), ("--no-python", "--no_python"))


def get_args_parser() -> ArgumentParser:
    parser = ArgumentParser(description="Torch Distributed Elastic Training Launcher")
    for flags, kind, default in _VALUED:
        parser.add_argument(*flags, action=env, type=kind, default=default)
    if has_shutdown_timeout():  # torch 2.12 on
        parser.add_argument(
            "--shutdown-timeout", "--shutdown_timeout", action=env, type=int, default=None
        )
    for flags in _FLAGS:
        parser.add_argument(*flags, action=check_env)
    parser.add_argument("training_script", type=str)
    parser.add_argument("training_script_args", nargs=REMAINDER)
    return parser


def parse_min_max_nnodes(nnodes: str) -> tuple[int, int]:
    parts = nnodes.split(":")
    if len(parts) == 1:
        return int(parts[0]), int(parts[0])
    if len(parts) == 2:
        return int(parts[0]), int(parts[1])
    raise RuntimeError(f'nnodes={nnodes} is not in "MIN:MAX" format')


def determine_local_world_size(nproc_per_node: str) -> int:
    try:
        return int(nproc_per_node)
    except ValueError as e:
        if nproc_per_node == "cpu":
            return os.cpu_count() or 1
        if nproc_per_node == "gpu":
            if not torch.cuda.is_available():
                raise ValueError("Cuda is not available.") from e
            return torch.cuda.device_count()
        if nproc_per_node == "auto":
            if torch.cuda.is_available():
                return torch.cuda.device_count()
            return os.cpu_count() or 1
        raise ValueError(f"Unsupported nproc_per_node value: {nproc_per_node}") from e


def config_from_args(args) -> tuple[LaunchConfig, str, list[str]]:
    min_nodes, max_nodes = parse_min_max_nnodes(args.nnodes)
    assert 0 < min_nodes <= max_nodes
    assert args.max_restarts >= 0
    nproc = determine_local_world_size(args.nproc_per_node)
    if "OMP_NUM_THREADS" not in os.environ and nproc > 1:
        logger.warning(
            "\n*****************************************\nSetting OMP_NUM_THREADS environment "
            "variable for each process to be 1 in default, to avoid your system being "
            "overloaded, please further tune the variable for optimal performance in your "
            "application as needed. \n*****************************************"
        )
        os.environ["OMP_NUM_THREADS"] = "1"
    endpoint = args.rdzv_endpoint
    if args.rdzv_backend == "static" and not endpoint:
        endpoint = f"{args.master_addr}:{args.master_port}"
    config = LaunchConfig(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nproc_per_node=nproc,
        run_id=args.rdzv_id,
        role=args.role,
        rdzv_endpoint=endpoint,
        rdzv_backend=args.rdzv_backend,
        max_restarts=args.max_restarts,
        monitor_interval=args.monitor_interval,
        master_addr=args.master_addr,
        signals_to_handle=args.signals_to_handle,
        shutdown_timeout=getattr(args, "shutdown_timeout", None),
    )
    if args.no_python:
        if args.module:
            raise ValueError(
                "Don't use both the '--no-python' flag and the '--module' flag at the same time."
            )
        return config, args.training_script, list(args.training_script_args)
    cmd_args = ["-u", *(["-m"] if args.module else []), args.training_script]
    return config, os.getenv("PYTHON_EXEC", sys.executable), cmd_args + args.training_script_args


def run(args) -> None:
    if args.standalone:
        args.rdzv_backend = "c10d"
        args.rdzv_endpoint = "localhost:0"
        args.rdzv_id = str(uuid.uuid4())
    config, cmd, cmd_args = config_from_args(args)
    elastic_launch(config=config, entrypoint=cmd)(*cmd_args)


def main(args=None) -> None:
    configure_logging()
    run(get_args_parser().parse_args(args))


if __name__ == "__main__":
    main()
