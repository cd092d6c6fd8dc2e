"""The local agent's worker processes, as torch.distributed.elastic.multiprocessing starts and
stops a binary entrypoint (``SubprocessContext``, ``SubprocessHandler``):

- each worker is ``Popen(entrypoint + args, env=os.environ | worker env, start_new_session=True)``:
  its own session and process group;
- the launcher turns SIGTERM, SIGINT, SIGHUP and SIGQUIT (``TORCHELASTIC_SIGNALS_TO_HANDLE``)
  into ``SignalException`` in its main thread;
- ``close(death_sig, timeout=30)`` sends ``death_sig`` to every running worker's process group
  (``os.killpg``), waits at most ``timeout`` seconds for all of them together, then SIGKILLs the
  process group of each one still running and waits for it;
- a poll is "all or nothing": every worker exited 0 (succeeded), or any exited otherwise (failed:
  the others are closed).

Source: pytorch/pytorch torch/distributed/elastic/multiprocessing/api.py (PContext.start, close,
SubprocessContext._poll, _close) and subprocess_handler/subprocess_handler.py.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

logger = logging.getLogger("torch.distributed.elastic.multiprocessing.api")

DEFAULT_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"


class SignalException(Exception):
    """Raised in the launcher's main thread by the handler of a death signal."""

    def __init__(self, msg: str, sigval: signal.Signals) -> None:
        super().__init__(msg)
        self.sigval = sigval


def _terminate_process_handler(signum, frame):
    sigval = signal.Signals(signum)
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)


@dataclass
class ProcessFailure:
    local_rank: int
    pid: int
    exitcode: int
    timestamp: float = field(default_factory=time.time)


@dataclass
class RunProcsResult:
    failures: dict = field(default_factory=dict)

    def is_failed(self) -> bool:
        return bool(self.failures)


class SubprocessHandler:
    """One worker: its own session (``start_new_session=True``), the parent's environment plus
    its own."""

    def __init__(self, entrypoint: str, args: tuple, env: dict, local_rank_id: int):
        merged = os.environ.copy()
        merged.update(env)
        self.local_rank_id = local_rank_id
        self.proc = subprocess.Popen(
            (entrypoint, *[str(a) for a in args]), env=merged, start_new_session=True
        )

    def close(self, death_sig: signal.Signals = signal.SIGTERM) -> None:
        try:
            os.killpg(self.proc.pid, death_sig)
        except ProcessLookupError:
            pass


class SubprocessContext:
    """The workers of one start of the worker group."""

    def __init__(self, name: str, entrypoint: str, args: dict, envs: dict):
        self.name = name
        self.entrypoint = entrypoint
        self.args = args
        self.envs = envs
        self.nprocs = len(args)
        self._running = set(range(self.nprocs))
        self._failures: dict[int, ProcessFailure] = {}
        self.handlers: dict[int, SubprocessHandler] = {}

    def start(self) -> None:
        if threading.current_thread() is threading.main_thread():
            names = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE", DEFAULT_SIGNALS)
            for name in names.split(","):
                try:
                    signal.signal(getattr(signal, name.strip()), _terminate_process_handler)
                except (AttributeError, ValueError):
                    logger.warning("Failed to register signal handler for %s", name)
        self.handlers = {
            rank: SubprocessHandler(self.entrypoint, self.args[rank], self.envs[rank], rank)
            for rank in range(self.nprocs)
        }

    def pids(self) -> dict[int, int]:
        return {rank: h.proc.pid for rank, h in self.handlers.items()}

    def _capture_failures(self, done: set) -> None:
        for rank in self._running:
            handler = self.handlers[rank]
            code = handler.proc.poll()
            if code is not None:
                done.add(rank)
                if code != 0:
                    self._failures[rank] = ProcessFailure(rank, handler.proc.pid, code)

    def poll(self) -> RunProcsResult | None:
        """None while every worker runs and none failed; else the result (others closed)."""
        done: set[int] = set()
        self._capture_failures(done)
        self._running -= done
        if self._running and not self._failures:
            return None
        self.close()
        self._capture_failures(done)
        result = RunProcsResult(failures=dict(self._failures))
        if result.is_failed():
            first = min(result.failures.values(), key=lambda f: f.timestamp)
            logger.error(
                "failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s",
                first.exitcode,
                first.local_rank,
                first.pid,
                self.entrypoint,
            )
        return result

    def close(self, death_sig: signal.Signals = signal.SIGTERM, timeout: int = 30) -> None:
        for handler in self.handlers.values():
            if handler.proc.poll() is None:
                logger.warning(
                    "Sending process %s closing signal %s", handler.proc.pid, death_sig.name
                )
                handler.close(death_sig)
        end = time.monotonic() + timeout
        for handler in self.handlers.values():
            left = end - time.monotonic()
            if left <= 0:
                break
            try:
                handler.proc.wait(left)
            except subprocess.TimeoutExpired:
                pass
        for handler in self.handlers.values():
            if handler.proc.poll() is None:
                logger.warning(
                    "Unable to shutdown process %s via %s, forcefully exiting via %s",
                    handler.proc.pid,
                    death_sig,
                    signal.SIGKILL,
                )
                handler.close(signal.SIGKILL)
                handler.proc.wait()


def configure_logging() -> None:
    """torchrun's log lines on stderr (``W<date> ... <message>``, shortened)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            stream=sys.stderr, level=logging.WARNING, format="%(levelname).1s %(message)s"
        )
