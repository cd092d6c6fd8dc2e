"""``verify_level=compile``: flex_attention compiles in the venv from one thread per GPU at once,
as the trainer does, without torch's FX-tracing race and without an eager fallback.

>>> FX_RACE
'FX to symbolically trace a dynamo-optimized function'
"""

from __future__ import annotations

from ..settings import Settings
from .inputs import Inputs
from .verdict import Problem, Verdict

#: What the race looks like (torch/_dynamo/eval_frame.py raises it when the process-global FX
#: tracing flag is set by another thread while a compiled function is entered).
FX_RACE = "FX to symbolically trace a dynamo-optimized function"


def check_compile(v: Verdict, f: Inputs) -> None:
    """At ``verify_level=compile``, the container's compile check passed (a warning when it
    could not run)."""
    if f.settings.verification.level != "compile":
        return
    comp = (f.ct or {}).get("compile")
    if comp is None:
        v.warnings.append("compile check not run: CUDA is not available in the venv")
    elif comp.get("refused"):
        # the probe refused it (probes/training_held.py: a training holds GPUs here)
        v.problems.append(
            Problem(
                "concurrent torch.compile",
                "a stopped training stack (verify_level=compile compiles on every GPU)",
                f"refused: a running training holds {len(comp.get('held') or [])} GPU(s) here",
                "stop the training first (a checkpoint, then `systemctl stop` its unit), "
                "or run deploy.py --data verify_level=compile --data restart_training=true: "
                "it stops the training first and starts it again after",
            )
        )
    else:
        _compile_problems(v, comp, f.runtime or {}, f.settings)


def _compile_problems(v: Verdict, comp: dict, rt: dict, settings: Settings) -> None:
    build = rt.get("version") or f"{settings.torch.version}+{settings.torch.variant}"
    threads = comp.get("threads") or []
    n = len(threads)
    failed = [t for t in threads if not t.get("ok")]
    if comp.get("error"):
        v.problems.append(
            Problem(
                "concurrent torch.compile",
                "flex_attention compiles in the venv",
                comp["error"],
                "run deploy.py --data rebuild=venv",
            )
        )
        return
    serial = comp.get("serial") or {}
    serial_text = (
        f"compiling under a lock, one device at a time, worked here in {serial.get('seconds')} s"
        if serial.get("ok")
        else f"compiling under a lock also failed: {serial.get('error')}"
        if serial
        else ""
    )
    if comp.get("race"):
        racing = [t["gpu"] for t in failed if FX_RACE in (t.get("error") or "")]
        v.problems.append(
            Problem(
                "concurrent torch.compile",
                f"flex_attention compiles from {n} threads at once (one per GPU, as the trainer "
                "does)",
                f"FX-tracing race on GPU {', '.join(map(str, racing))} with torch {build}: "
                f"RuntimeError: Detected that you are using {FX_RACE}",
                "torch's FX-tracing flag is process-wide: run one training process per GPU, or "
                "compile under a lock and warm each device in turn before training"
                + (f"; {serial_text}" if serial_text else ""),
            )
        )
    elif failed:
        t = failed[0]
        v.problems.append(
            Problem(
                "concurrent torch.compile",
                f"flex_attention compiles on all {n} GPUs",
                f"GPU {t.get('gpu')}: {t.get('error')}"
                + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""),
                "check the GPU and the torch build (run the check again with -v for the facts)"
                + (f"; {serial_text}" if serial_text else ""),
            )
        )
    if comp.get("fallback"):
        v.problems.append(
            Problem(
                "concurrent torch.compile",
                "compiled kernels (no eager fallback)",
                f"fell back: {comp['fallback'][0]}",
                "fix the compile (TORCH_LOGS=graph_breaks,recompiles in the trainer) before a long "
                "run",
            )
        )
