"""Rendering the training systemd unit from templates/training.service.j2, and reading back what a
running unit started with.

>>> "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in render_unit(Settings.from_data(defaults()))
True

A running unit records what it started with (``ExecStartPre`` writes ``started_record``); deploy.py
compares that with what a start now would run, to tell whether a restart is pending:

>>> s = Settings.from_data(defaults())
>>> rec = parse_started_record("unit abc  -\\nvenv /root/venvs/torch-2.11.0-cu128\\nbuilt 17\\n")
>>> rec
{'unit': 'abc', 'venv': '/root/venvs/torch-2.11.0-cu128', 'built': '17'}
>>> pending_reasons(rec, {"unit": "abc", "venv": s.build_venv, "built": "17"})
['venv build /root/venvs/torch-2.11.0-cu128 -> /root/venvs/torch-2.11.0-cu130']
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import jinja2

from ..digests import text_digest as digest
from ..paths import TEMPLATES
from ..settings import Settings, SettingsError, TrainingSettings, defaults  # noqa: F401 (doctest)
from .command import argv_for, export_lines, set_words, summary
from .template_cache import with_cache

# ActiveStates in which the unit counts as running: the deploy neither starts it again nor, unless
# asked, stops it (deactivating: someone is stopping it, maybe checkpointing for 15 minutes).
RUNNING = ("active", "activating", "reloading", "deactivating")
# The first line of every rendered training unit: the probes recognise pvegpu's units by it, so a
# unit left under an earlier training_unit_name is found (and never runs beside the new one).
UNIT_MARKER = "# Rendered by pvegpu from templates/training.service.j2"
# Name of the marker file every built venv carries (written by operations.python_env).
BUILD_MARKER = ".pvegpu-build.json"
# The build's training settings, in the build (templates/training.env.j2; written by
# operations.training.live_build_and_unit): the unit sources it from the build it starts.
BUILD_ENV = ".pvegpu-train.env"


def unit_file(training: TrainingSettings) -> str:
    """``dflash-train.service``"""
    return f"{training.unit_name}.service"


def unit_path(training: TrainingSettings) -> str:
    return f"/etc/systemd/system/{unit_file(training)}"


def runtime_dir(training: TrainingSettings) -> str:
    """The unit's RuntimeDirectory= (under /run): systemd creates it at start, removes it at
    stop."""
    return f"pvegpu-{training.unit_name}"


def started_record(training: TrainingSettings) -> str:
    return f"/run/{runtime_dir(training)}/started"


def unit_context(settings: Settings) -> dict:
    """Every value of the unit, from settings; none depends on the selected variant (those are
    the build's: ``build_env_context``), so a swap leaves the unit file as it is."""
    gpus = sorted(settings.gpus.training)
    return {
        "unit_name": settings.training.unit_name,
        "unit_path": unit_path(settings.training),
        "runtime_dir": runtime_dir(settings.training),
        "started_record": started_record(settings.training),
        "build_marker": BUILD_MARKER,
        "build_env": BUILD_ENV,
        "data_dir": settings.container.data_dir_ct,
        "workdir": settings.training.workdir,
        "visible_devices": ",".join(str(g) for g in gpus),
        "alloc_conf": settings.training.alloc_conf,
        "venv_path": settings.python_env.venv_path,
        "launcher": settings.training.launcher,
        "command_summary": Quoted(summary(settings.training.launcher, settings.training.command)),
        "stop_timeout_s": settings.training.stop_timeout_s,
        # the torchrun ExecStop's wait for its workers ends before TimeoutStopSec, which
        # applies to ExecStop too: its own end, not systemd's kill of it, moves the stop on
        "exec_stop_wait_s": max(1, settings.training.stop_timeout_s - 5),
        "hold_launcher": not settings.torch.launcher_shutdown_timeout,  # see the template
        "restart_delay_s": settings.training.restart_delay_s,
        "restart_burst": settings.training.restart_burst,
    }


# What a value rendered into the unit may hold. systemd (systemd.syntax(7), systemd.service(5)
# "COMMAND LINES", systemd.unit(5) "SPECIFIERS") splits on whitespace, unquotes '...' and "...",
# expands C escapes after \\, % specifiers, $VAR/${VAR}, and ';' separates commands; a newline
# ends the directive. The values also sit inside sh -c '...'. None of those characters may pass,
# so the unit needs no escaping and cannot be rewritten by a value.
UNIT_VALUE_RE = re.compile(r"^[A-Za-z0-9_./@+:,\[\]-]*$")


def unit_value(value):
    """A value as rendered into the unit, or SettingsError when it holds a character systemd or
    the shell would interpret (a newline, a space, a quote, $, %, \\, ;, ...).

    >>> unit_value("/data/x.py"), unit_value(48)
    ('/data/x.py', 48)
    >>> unit_value("a\\nExecStartPre=/bin/touch /tmp/INJECTED")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    pvegpu.settings.SettingsError: 'a\\nExecStartPre=/bin/touch /tmp/INJECTED' cannot be written
    into a systemd unit (newline, space, quote, $, %, \\ or ; would be interpreted): fix the
    setting it comes from
    """
    if isinstance(value, (bool, int)) or UNIT_VALUE_RE.match(str(value)):
        return value
    if isinstance(value, Quoted) and not CONTROL_RE.search(value):
        return value
    raise SettingsError(
        f"{str(value)!r} cannot be written into a systemd unit (newline, space, quote, $, %, \\ "
        "or ; would be interpreted): fix the setting it comes from"
    )


class Quoted(str):
    """Text already made safe for where the template puts it (a comment line of the unit, a line
    of the build's settings file quoted for sh): ``unit_value`` only refuses a control character
    in it."""


CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


@functools.lru_cache(maxsize=8)  # one Environment per run: it keeps the compiled template
def _unit_env(templates: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        finalize=unit_value,  # every {{ value }} passes the check, whatever its source
    )
    return with_cache(env)  # compiled templates kept between runs


def build_env_context(settings: Settings) -> dict:
    """The values of the selected build's training settings file (``BUILD_ENV``): its compile
    cache dir and the variant's ``token_budget``/``max_batch_size`` (overrides merged)."""
    return {
        "build_name": settings.torch.build_name,
        "unit_name": settings.training.unit_name,
        "cache_dir": settings.compile_cache_dir,
        "token_budget": settings.training_value("token_budget"),
        "max_batch_size": settings.training_value("max_batch_size"),
        "exports": [Quoted(line) for line in export_lines(settings.training.env)],
        "set_words": Quoted(set_words(argv_for(settings))),
    }


def render_unit(settings: Settings, templates: Path = TEMPLATES) -> str:
    return _unit_env(templates).get_template("training.service.j2").render(**unit_context(settings))


def render_build_env(settings: Settings, templates: Path = TEMPLATES) -> str:
    """The selected build's training settings file, sourced by the unit's ExecStart.

    >>> print(render_build_env(Settings.from_data(defaults())).splitlines()[2])
    export TORCHINDUCTOR_CACHE_DIR=/data/cache/torch-2.11.0-cu130/inductor
    """
    env = _unit_env(templates).get_template("training.env.j2")
    return env.render(**build_env_context(settings))


def build_env_path(settings: Settings) -> str:
    """Where the selected build's training settings file lives (through the build's link).

    >>> build_env_path(Settings.from_data(defaults()))
    '/root/venvs/torch-2.11.0-cu130/.pvegpu-train.env'
    """
    return f"{settings.build_venv}/{BUILD_ENV}"


def _verdict_path(text: str, unit_name: str, tool: str) -> Path:
    """Where ``systemd-analyze verify``'s verdict on this unit text by this very tool (path, size,
    mtime) is kept on the controller: the same input gets the same verdict, so a run does not
    pay the tool's start-up (0.15 s) again for a unit an earlier run checked."""
    st = os.stat(tool)
    key = digest(f"{tool}\0{st.st_size}\0{st.st_mtime_ns}\0{unit_name}\0{text}")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "pvegpu" / "unit-verify" / key


@functools.lru_cache(maxsize=32)  # every host of a fleet usually renders the same unit
def verify_problems(text: str, unit_name: str) -> tuple[str, ...]:
    """What ``systemd-analyze verify`` says about a rendered unit, one line each (empty: none, or
    no systemd-analyze on this controller), kept by ``_verdict_path``. It reports many bad values
    on stderr and still exits 0 ("..., ignoring"), so every line naming the unit is a problem,
    and so is a failing exit. The unit is checked here, on the controller, before anything is
    installed anywhere."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return ()
    kept = _verdict_path(text, unit_name, tool)
    try:
        return tuple(json.loads(kept.read_text()))
    except (OSError, ValueError):
        pass
    lines = _run_verify(tool, text, unit_name)
    try:  # a cache that cannot be written only costs the next run the tool's start-up
        kept.parent.mkdir(parents=True, exist_ok=True)
        tmp = kept.with_name(f"{kept.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(list(lines)))
        tmp.replace(kept)
    except OSError:
        pass
    return lines


def _run_verify(tool: str, text: str, unit_name: str) -> tuple[str, ...]:
    with tempfile.TemporaryDirectory(prefix="pvegpu-unit-") as d:
        path = Path(d) / f"{unit_name}.service"
        path.write_text(text)
        p = subprocess.run([tool, "verify", str(path)], capture_output=True, text=True, timeout=120)
    lines = [
        line.strip().replace(str(path), path.name)
        for line in p.stderr.splitlines()
        if path.name in line
    ]
    if p.returncode != 0 and not lines:
        lines = [line.strip() for line in p.stderr.splitlines() if line.strip()][-1:] or [
            f"exit status {p.returncode}"
        ]
    return tuple(lines)


def unit_problems(settings: Settings, templates: Path = TEMPLATES) -> list[str]:
    """One line per reason the training unit of ``settings`` cannot be installed: a value it
    cannot hold, or what ``systemd-analyze verify`` rejects.

    >>> unit_problems(Settings.from_data(defaults()))
    []
    """
    try:
        text = render_unit(settings, templates)
    except SettingsError as e:
        return [str(e)]
    unit = unit_file(settings.training)
    return [
        f"{unit} as rendered is rejected by systemd-analyze verify: {line}: "
        "fix the setting or templates/training.service.j2"
        for line in verify_problems(text, settings.training.unit_name)
    ]


def training_argv_prefix(settings: Settings) -> list[str]:
    """The start of the training command's argv when started through ``venv_path`` (by hand, say).
    ExecStart runs the same script with the resolved build's python; see ``training_matcher``."""
    return [f"{settings.python_env.venv_path}/bin/python", settings.training.script]


def training_matcher(settings: Settings) -> dict:
    """How a process is recognised as the training command (and nothing else is ever killed):
    argv[1] is the training script and argv[0] the python of ``venv_path`` or of a build under
    ``venvs_dir`` (ExecStart resolves the link when it starts).

    >>> from pvegpu.settings import defaults
    >>> training_matcher(Settings.from_data(defaults()))["script"]
    '/data/dflash/train.py'
    """
    return {
        "script": settings.training.script,
        "pythons": [f"{settings.python_env.venv_path}/bin/python"],
        "python_under": [settings.python_env.venvs_dir.rstrip("/") + "/"],
    }


def running_other_units(others: dict | None) -> list[str]:
    """The other pvegpu training units that run, from a fact's ``{name: active}`` or
    ``{name: {"active": ...}}``.

    >>> running_other_units({"a.service": "active", "b.service": {"active": "inactive"}})
    ['a.service']
    """
    names = []
    for name, state in sorted((others or {}).items()):
        active = state.get("active") if isinstance(state, dict) else state
        if active in RUNNING:
            names.append(name)
    return names


def renamed_unit_line(settings: Settings, where: str, running: list[str]) -> str:
    """The one line that refuses a renamed unit while the old one runs.

    >>> from pvegpu.settings import defaults
    >>> renamed_unit_line(Settings.from_data(defaults()), "CT 200", ["old.service"])[:60]
    'CT 200: old.service is running, but training_unit_name=dflas'
    """
    old, unit = ", ".join(running), unit_file(settings.training)
    return (
        f"{where}: {old} is running, but training_unit_name={settings.training.unit_name} asks for "
        f"{unit}: a renamed unit would be a second trainer on the same GPUs; pass "
        f"--data restart_training=true to stop and disable {old} and start {unit}, "
        f"or set training_unit_name back"
    )


def parse_started_record(text: str | None) -> dict | None:
    """The record ExecStartPre wrote: ``{"unit": sha256, "venv": link target, "built": mtime,
    "env": sha256 of the build's training settings}`` (None when there is none)."""
    if not text:
        return None
    record = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        value = value.strip()
        record[key] = value.split()[0] if key in ("unit", "env") and value else value
    return record


def desired_start(settings: Settings, unit_text: str, built: object) -> dict:
    """What a start now would record: the rendered unit, the selected build, its build time and
    its training settings file (rendered from ``settings``)."""
    return {
        "unit": digest(unit_text),
        "venv": settings.build_venv,
        "built": "" if built is None else str(built),
        "env": digest(render_build_env(settings)),
    }


def pending_reasons(started: dict | None, desired: dict) -> list[str]:
    """Why the running unit differs from what a start now would run (empty: it does not)."""
    if started is None:
        return [
            "the running unit left no start record (started before pvegpu recorded starts, "
            "or the record write failed)"
        ]
    reasons = []
    if started.get("unit") != desired["unit"]:
        reasons.append("unit file changed")
    if started.get("venv") != desired["venv"]:
        reasons.append(f"venv build {started.get('venv') or '(none)'} -> {desired['venv']}")
        return reasons  # another build comes with its own training settings
    if started.get("built") != desired["built"]:
        reasons.append(f"venv {desired['venv']} was rebuilt")
    if started.get("env") != desired["env"]:
        reasons.append(
            f"training settings of {desired['venv']} changed (training_command, training_env, "
            "token_budget, max_batch_size or compile cache dir)"
        )
    return reasons


def unit_plan(
    settings: Settings, active: str | None, started: str | None, built: object
) -> tuple[str, list[str]]:
    """(ActiveState, reasons a restart is pending) of the unit, from its ``systemctl is-active``
    answer, its start record's text and the selected build's time (the marker's mtime).

    >>> unit_plan(Settings.from_data(defaults()), "failed", None, None)
    ('failed', [])
    """
    active = active or "inactive"
    if active not in RUNNING:
        return active, []
    desired = desired_start(settings, render_unit(settings), built)
    return active, pending_reasons(parse_started_record(started), desired)


def clears_leftovers(settings: Settings, active: str, reasons: list[str]) -> bool:
    """Whether the deploy's stage 5 clears leftover training processes (then starts the unit):
    when the unit is not running, or when a pending restart is asked for (restart_training=true).

    >>> s = Settings.from_data(defaults())
    >>> clears_leftovers(s, "inactive", []), clears_leftovers(s, "active", ["unit file changed"])
    (True, False)
    """
    return active not in RUNNING or bool(reasons and settings.policy.restart_training)


def start_command(settings: Settings) -> str:
    """Start the unit as the deploy does: its start count reset first. ``StartLimitBurst`` backs
    off a crash loop (systemd's automatic restarts), and systemd counts every start in the hour;
    a start the deploy makes (the first, after a failure, or a restart asked for) opens a new
    count, so it is never refused (``Start request repeated too quickly``) after stopping a
    running training, and the automatic restarts after it are the documented burst - 1.
    ``reset-failed`` also clears a failed state (systemd's ``unit_reset_failed``).

    >>> from pvegpu.settings import defaults
    >>> start_command(Settings.from_data(defaults()))
    'systemctl reset-failed dflash-train.service; systemctl start dflash-train.service'
    """
    unit = shlex.quote(unit_file(settings.training))
    return f"systemctl reset-failed {unit}; systemctl start {unit}"
