"""A command that runs a script on the host and, on failure, logs one clear line: what failed,
why (the script's own ``pvegpu: ...`` line, uv's error, or its last output line) and the fix."""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api import FunctionCommand, StringCommand

from ..locks import redact, uv_error
from ..run.ct_reads import change_then_read_script, keep_reads, split_reads
from .progress import Progress, run_with_progress


def remote_step(
    what: str,
    script: str,
    fix: str,
    notes: tuple[str, ...] = (),
    hints: dict[str, str] | None = None,
    progress: Progress | None = None,
    reads: tuple[str, ...] = (),
) -> FunctionCommand:
    """Run ``script`` on the host; on failure log one line: what failed, why, and the fix
    (``hints``: a fix that replaces it when the reason contains the key; ``progress``: the lines
    it logs while it runs, :mod:`pvegpu.operations.progress`; ``reads``: container reads run
    right after it in the same command, for the next operation:
    :func:`pvegpu.run.ct_reads.change_then_read`).

    .. code:: python

        yield remote_step("installing uv 0.13.9", script, "the live venv is untouched")
    """
    if reads:
        script = change_then_read_script(script, list(reads))

    def step(state, host):
        for line in notes:
            host.log_styled(line, fg="yellow", log_func=logger.warning)
        if progress:
            status, output = run_with_progress(state, host, StringCommand(script), progress)
        else:
            status, output = host.run_shell_command(
                StringCommand(script),
                print_output=state.print_output,
                print_input=state.print_input,
            )
        lines = [o.line for o in output.combined_lines]
        if reads and "pvegpu-read 0" in lines:  # the reads after it print nothing of its own
            lines = lines[: lines.index("pvegpu-read 0")]
        ours = [line.split("pvegpu: ", 1)[1] for line in lines if "pvegpu: " in line]
        if status:
            for line in ours:
                host.log_styled(line, fg="cyan", log_func=logger.info)
            if reads and state.is_executing:
                keep_reads(state, host, split_reads(list(output.stdout_lines), list(reads)))
            return True
        for line in lines:
            logger.debug(f"{host.name}: {redact(line)}")
        reason = (
            (ours[-1] if ours else None)
            or uv_error(lines)
            or next((line.strip() for line in reversed(lines) if line.strip()), "no output")
        )
        fix_now = next((h for key, h in (hints or {}).items() if key in reason), fix)
        host.log_styled(
            redact(f"{what} failed: {reason}; {fix_now}"), fg="red", log_func=logger.error
        )
        return False

    return FunctionCommand(step, (), {})
