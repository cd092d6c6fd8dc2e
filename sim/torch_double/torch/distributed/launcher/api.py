"""The elastic agent of one node, as ``torchrun`` runs it (``launch_agent``): rendezvous, start the
worker group, monitor it every ``monitor_interval`` seconds, restart it on a failure while
``max_restarts`` allow, and on a death signal close the workers and re-raise.

- worker env: ``RANK``, ``GROUP_RANK``, ``ROLE_RANK``, ``ROLE_NAME``, ``LOCAL_RANK``,
  ``LOCAL_WORLD_SIZE``, ``WORLD_SIZE``, ``GROUP_WORLD_SIZE``, ``ROLE_WORLD_SIZE``,
  ``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_RESTART_COUNT``,
  ``TORCHELASTIC_MAX_RESTARTS``, ``TORCHELASTIC_RUN_ID``, ``TORCHELASTIC_USE_AGENT_STORE``,
  ``TORCH_NCCL_ASYNC_ERROR_HANDLING``, ``TORCHELASTIC_ERROR_FILE`` (and ``OMP_NUM_THREADS``,
  ``CUDA_VISIBLE_DEVICES`` when the launcher has them), over the launcher's own environment;
- a failed group (a worker exited non-zero or by a signal) is closed (SIGTERM, 30 s, SIGKILL)
  and started again with ``TORCHELASTIC_RESTART_COUNT`` + 1, or, with no restart left, the
  launcher fails with ``ChildFailedError`` (exit status 1);
- SIGTERM/SIGINT/SIGHUP/SIGQUIT: ``Received <sig> death signal, shutting down workers``, the
  workers closed with that signal (``close(sig, shutdown_timeout)``), then the exception ends the
  launcher (exit status 1). ``shutdown_timeout`` is 30 before torch 2.12; from 2.12 it is
  ``--shutdown-timeout``, else the environment variable ``_shutdown.VARIABLE`` names, else 30
  (``LaunchConfig``'s ``__post_init__``; pytorch pull 172596: CLI -> LaunchConfig -> agent ->
  ``PContext.close``). sim/wheels.py writes ``_shutdown.py`` into the 2.12 builds only: a torch
  2.11's source never names the variable (bench/gpu_reality.py greps for it). A failed group is
  still closed with the fixed 30 s (``_stop_workers``; pytorch pull 192815).

One node only: the simulation has no other node to meet; the store the agent hosts is a
listening socket on loopback (the real TCPStore serves the rendezvous on it).

Source: pytorch/pytorch torch/distributed/launcher/api.py (launch_agent),
torch/distributed/elastic/agent/server/api.py (SimpleElasticAgent.run, _invoke_run) and
local_elastic_agent.py (_start_workers, _shutdown).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ..elastic.multiprocessing.api import SignalException, SubprocessContext

try:
    from ._shutdown import VARIABLE as SHUTDOWN_VARIABLE  # torch 2.12 on (sim/wheels.py)
except ImportError:
    SHUTDOWN_VARIABLE = None

logger = logging.getLogger("torch.distributed.elastic.agent.server.api")
_SIM_NOTE = "pvegpu simulation of torchrun: "


@dataclass
class LaunchConfig:
    min_nodes: int
    max_nodes: int
    nproc_per_node: int
    run_id: str = ""
    role: str = "default"
    rdzv_endpoint: str = ""
    rdzv_backend: str = "etcd"
    max_restarts: int = 3
    monitor_interval: float = 0.1
    master_addr: str = "127.0.0.1"
    signals_to_handle: str = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    rdzv_configs: dict = field(default_factory=dict)
    shutdown_timeout: int | None = None

    def __post_init__(self) -> None:
        if SHUTDOWN_VARIABLE is None:
            self.shutdown_timeout = 30  # fixed before torch 2.12: no option, no variable
        elif self.shutdown_timeout is None:
            self.shutdown_timeout = int(os.environ.get(SHUTDOWN_VARIABLE, "30"))
        elif self.shutdown_timeout < 0:
            raise ValueError(f"shutdown_timeout must be non-negative, got {self.shutdown_timeout}")


def has_shutdown_timeout() -> bool:
    """Whether this torch has the configurable wait (2.12 and later)."""
    return SHUTDOWN_VARIABLE is not None


class ChildFailedError(Exception):
    """A worker failed and no restart was left (torch's error summary, shortened)."""

    def __init__(self, name: str, failures: dict):
        first = min(failures.values(), key=lambda f: f.timestamp)
        bar = "=" * 60
        super().__init__(
            f"\n{bar}\n{name} FAILED\n{'-' * 60}\nRoot Cause (first observed failure):\n"
            f"[{first.local_rank}]:\n  rank      : {first.local_rank} "
            f"(local_rank: {first.local_rank})\n  exitcode  : {first.exitcode} "
            f"(pid: {first.pid})\n{bar}"
        )


def _store(config: LaunchConfig) -> tuple[socket.socket, str, int]:
    """The agent's store: (listening socket, MASTER_ADDR, MASTER_PORT)."""
    host, _, port = config.rdzv_endpoint.rpartition(":")
    if config.rdzv_backend == "static":
        addr = config.master_addr
    elif config.rdzv_backend == "c10d" and host in ("localhost", "127.0.0.1", ""):
        addr = socket.gethostname()  # the real agent: its FQDN (no name lookup here)
    else:
        raise RuntimeError(
            _SIM_NOTE + f"rendezvous {config.rdzv_backend} at {config.rdzv_endpoint!r} needs "
            "other nodes: only --standalone or a static one on this node is simulated"
        )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", int(port or 0)))  # EADDRINUSE as the real store's bind fails
    sock.listen(16)
    return sock, addr, sock.getsockname()[1]


class LocalAgent:
    def __init__(self, config: LaunchConfig, entrypoint: str, args: list):
        self.config = config
        self.entrypoint = entrypoint
        self.args = tuple(args)
        self.remaining = config.max_restarts
        self.context: SubprocessContext | None = None
        self.error_dir = tempfile.mkdtemp(prefix="torchelastic_")

    def _envs(self, master: tuple[str, int]) -> dict:
        n, c = self.config.nproc_per_node, self.config
        common = {
            "GROUP_RANK": "0",
            "ROLE_NAME": c.role,
            "LOCAL_WORLD_SIZE": str(n),
            "WORLD_SIZE": str(n),
            "GROUP_WORLD_SIZE": "1",
            "ROLE_WORLD_SIZE": str(n),
            "MASTER_ADDR": master[0],
            "MASTER_PORT": str(master[1]),
            "TORCHELASTIC_RESTART_COUNT": str(c.max_restarts - self.remaining),
            "TORCHELASTIC_MAX_RESTARTS": str(c.max_restarts),
            "TORCHELASTIC_RUN_ID": c.run_id,
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        }
        envs = {}
        for rank in range(n):
            env = dict(common, RANK=str(rank), ROLE_RANK=str(rank), LOCAL_RANK=str(rank))
            for inherited in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"):
                if inherited in os.environ:
                    env[inherited] = os.environ[inherited]
            env["TORCHELASTIC_ERROR_FILE"] = os.path.join(self.error_dir, str(rank), "error.json")
            envs[rank] = env
        return envs

    def _start(self, master: tuple[str, int]) -> None:
        n = self.config.nproc_per_node
        self.context = SubprocessContext(
            self.config.role,
            self.entrypoint,
            dict.fromkeys(range(n), self.args),
            self._envs(master),
        )
        self.context.start()

    def _invoke_run(self, master: tuple[str, int]):
        self._start(master)
        while True:
            time.sleep(self.config.monitor_interval)
            result = self.context.poll()
            if result is None:
                continue
            if not result.is_failed():
                return result
            if self.remaining <= 0:
                return result
            logger.warning(
                "[%s] Worker group FAILED. %s/%s attempts left; will restart worker group",
                self.config.role,
                self.remaining,
                self.config.max_restarts,
            )
            self.remaining -= 1
            self._start(master)

    def run(self, master: tuple[str, int]):
        shutdown_called = False
        try:
            return self._invoke_run(master)
        except SignalException as e:
            logger.warning("Received %s death signal, shutting down workers", e.sigval)
            if self.context is not None:
                self.context.close(e.sigval, self.config.shutdown_timeout)
            shutdown_called = True
            raise
        finally:
            if not shutdown_called and self.context is not None:
                self.context.close()


def launch_agent(config: LaunchConfig, entrypoint: str, args: list):
    if config.max_nodes != 1:
        raise RuntimeError(_SIM_NOTE + f"--nnodes {config.min_nodes}:{config.max_nodes}: one node")
    os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = config.signals_to_handle
    store, addr, port = _store(config)
    try:
        result = LocalAgent(config, entrypoint, args).run((addr, port))
    finally:
        store.close()
    if result.is_failed():
        raise ChildFailedError(_entrypoint_name(entrypoint, args), result.failures)
    return {}


class elastic_launch:  # noqa: N801 (torch's name)
    def __init__(self, config: LaunchConfig, entrypoint: str):
        self._config = config
        self._entrypoint = entrypoint

    def __call__(self, *args):
        return launch_agent(self._config, self._entrypoint, list(args))


def _entrypoint_name(entrypoint: str, args: list) -> str:
    """The python's first argument that is no flag (``train.py``), else the entrypoint."""
    if entrypoint == sys.executable:
        return next((a for a in args if not a.startswith("-")), "")
    return entrypoint
