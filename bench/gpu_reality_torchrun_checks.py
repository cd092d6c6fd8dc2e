"""The checks of bench/gpu_reality.py's torchrun steps (bench/gpu_reality_torchrun.py): what was
found beside what the torchrun unit's stop relies on (pure functions, stdlib only;
tests/unit/test_gpu_reality_parsing.py pins them). A row: gpu_reality_report.check's shape.
"""

from __future__ import annotations

import re


def check(name, expected, found, ok) -> dict:
    return {"name": name, "expected": expected, "found": found, "ok": ok}


def version_of(text: str | None) -> tuple[int, int] | None:
    """(major, minor) of a torch version.

    >>> version_of("2.13.0+cpu"), version_of("2.10.0a0+git1234"), version_of(None)
    ((2, 13), (2, 10), None)
    """
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m[1]), int(m[2])) if m else None


def help_options(text: str) -> set[str]:
    """Every long option an argparse ``--help`` names.

    >>> sorted(help_options("usage: x [--nnodes NNODES] [--signals-to-handle SIGNALS_TO_HANDLE]"))
    ['--nnodes', '--signals-to-handle']
    """
    return set(re.findall(r"(?<![\w-])--[a-z][\w-]*", text))


def options_check(opts: dict) -> dict:
    """torchrun's options and source beside the torch releases that brought them."""
    version, found = version_of(opts.get("torch")), opts.get("found") or {}
    names = help_options(opts.get("help") or "")
    has = {o: o in names for o in ("--signals-to-handle", "--shutdown-timeout")}
    env, killpg = found.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT") or [], found.get("os.killpg") or []
    ok = None
    if version and opts.get("help_rc") == 0:
        ok = (
            has["--signals-to-handle"] == (version >= (2, 10))
            and has["--shutdown-timeout"] == bool(env) == (version >= (2, 12))
            and bool(killpg)
        )
    found_text = (
        f"torch {opts.get('torch')}{' (the double)' if opts.get('double') else ''}: {has}, "
        f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT in {env}, os.killpg in {killpg}"
    )
    return check(
        "torchrun options",
        "--signals-to-handle from torch 2.10; --shutdown-timeout and "
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT from 2.12; os.killpg of each worker's group in every one",
        opts.get("error") or found_text,
        ok,
    )


LOADER_EXPECTED = {  # how: (the check's name, what the unit's stop relies on)
    "worker": (
        "SIGTERM to a DataLoader worker",
        "it dies by it (-15), the trainer raises "
        "`DataLoader worker (pid(s) N) exited unexpectedly`",
    ),
    "group": (
        "SIGTERM to the trainer's group",
        "(torchrun's os.killpg) its DataLoader workers "
        "die by it, the trainer raises: no checkpoint",
    ),
    "trainer": (
        "SIGTERM to the trainer alone",
        "(the unit's stop) checkpoint written, DataLoader workers exit 0, trainer exit 0",
    ),
}


def loader_checks(steps: dict) -> list[dict]:
    """The DataLoader trainer SIGTERMed three ways, beside what the unit's stop relies on."""
    got, out = steps.get("dataloader") or {}, []
    for how, (name, expected) in LOADER_EXPECTED.items():
        run = got.get(how) or {}
        codes, raised, saved = (
            run.get("exitcodes") or [],
            run.get("raised") or "",
            run.get("checkpoint"),
        )
        ok = {
            "worker": codes[:1] == [-15] and "exited unexpectedly" in raised,
            "group": -15 in codes and bool(raised) and not saved,
            "trainer": bool(saved) and run.get("rc") == 0 and set(codes) == {0},
        }[how]
        found = f"rc {run.get('rc')}, its DataLoader workers' exit codes {codes}, checkpoint "
        found += f"{bool(saved)}; {raised or 'raised nothing'}"
        skipped = got.get("skipped") or got.get("error") or run.get("error")
        out.append(check(name, expected, skipped or found, None if skipped else ok))
    return out


def held_found(name: str, run: dict) -> tuple[str, bool | None]:
    """One held-launcher run in words, and whether its worker got out while held."""
    if run.get("error"):
        return f"{name}: {run['error']} ({(run.get('worker') or {}).get('error')})", None
    destroy, rc = (run.get("worker") or {}).get("destroy_s"), run.get("launcher_rc")
    if run.get("held_exit_s") is None:
        out = run.get("released_exit_s")
        out = f"out {out} s after" if out is not None else "still running 5 s after"
        out += " the launcher's release (SIGTERM, SIGCONT)"
        held = f"still running {run.get('hold_s')} s held"
        return f"{name}: {held}, {out}; launcher rc {rc}", False
    text = f"{name}: exited in {run['held_exit_s']} s held ({run.get('exit_status')}, "
    text += f"destroy {destroy} s); launcher rc {rc}"
    if (run.get("worker") or {}).get("process_group") is False:  # the simulator's torch double
        return text + " (no process group: this torch has none)", None
    return text, run.get("exit_status") == "exit 0"


def held_check(steps: dict) -> dict:
    """The NCCL worker of a held torchrun: out of destroy_process_group while the launcher is
    stopped, or not (its store does not answer then)."""
    got = steps.get("nccl_held") or {}
    runs = [held_found(n, r) for n, r in got.items() if isinstance(r, dict)]
    oks = [ok for _, ok in runs]
    return check(
        "NCCL worker, launcher held",
        "out of destroy_process_group(), exit 0, while torchrun is stopped (default; "
        "TORCH_NCCL_DUMP_ON_TIMEOUT=0)",
        got.get("skipped") or got.get("error") or "; ".join(t for t, _ in runs),
        None if None in oks or not oks else all(oks),
    )


def torchrun_checks(steps: dict) -> list[dict]:
    """The checks of the torchrun steps (these run without a GPU too)."""
    return [options_check(steps.get("torchrun_options") or {}), *loader_checks(steps)] + [
        held_check(steps)
    ]
