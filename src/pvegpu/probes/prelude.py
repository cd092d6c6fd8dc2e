"""Helpers every probe gets: pvegpu.facts.probe puts this file in front of each probe it sends
(after ARGS) and drops the probe's own import of this module, which is there for readers and
linters only (pvegpu is not installed where probes run). Stdlib only."""

import hashlib
import os
import subprocess

#: Read-only commands started at once by start_early (they run side by side); run() of the same
#: argv collects the started process instead of starting another.
STARTED: dict = {}
#: How a command's output is decoded: UTF-8, a byte that is not as \xNN (as_text below), so a
#: file or process name in another encoding in what it prints never fails the probe.
TEXT = {"encoding": "utf-8", "errors": "backslashreplace"}


def start_early(*argvs, env=None):
    """Start read-only ``argvs`` now (with ``env``, else this process's), to be collected by
    ``run(argv)`` later."""
    for argv in argvs:
        try:
            STARTED[tuple(argv)] = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, **TEXT
            )
        except OSError:
            pass


def run(argv, timeout=120, env=None):
    """(exit status, stdout, stderr) of ``argv``; 127 when it cannot be started, 124 when it ran
    past ``timeout`` seconds (stderr then says which)."""
    proc = STARTED.pop(tuple(argv), None)
    if proc is not None:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return 124, "", f"{argv[0]}: timed out after {timeout} s"
        return proc.returncode, out, err
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, env=env, **TEXT)
    except OSError:
        return 127, "", f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out after {timeout} s"
    return p.returncode, p.stdout, p.stderr


def as_text(data):
    r"""``data`` (bytes) as text that never fails to decode nor to go into the JSON document:
    UTF-8, each byte that is not UTF-8 (a Latin-1 file name in an argv) as ``\xNN``, as systemd
    and Python write such a byte. Not surrogateescape: a lone surrogate passes json.dumps but
    breaks the controller's first print of it.

    >>> as_text(b"caf\xe9.txt"), as_text("café".encode())
    ('caf\\xe9.txt', 'café')
    """
    return data.decode("utf-8", "backslashreplace")


def read(path):
    r"""The text of ``path`` (UTF-8, another byte as ``\xNN``: :func:`as_text`; never the
    locale's codec, whose strict decoding raises on such a byte), or None when it cannot be
    read.

    >>> read("/nonexistent") is None
    True
    """
    try:
        with open(path, encoding="utf-8", errors="backslashreplace") as f:
            return f.read()
    except OSError:
        return None


def read_bytes(path):
    """The bytes of ``path``, or None when it cannot be read.

    >>> read_bytes("/nonexistent") is None
    True
    """
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def proc_argv(pid):
    """The argv of process ``pid``, each argument :func:`as_text`; [] for a kernel thread or an
    exiting process (empty cmdline), None when it is gone. /proc/<pid>/cmdline is each
    argument's raw bytes, NUL-ended (proc(5)): read as bytes, split, then decoded, so a byte
    that is not UTF-8 in one argument never costs the process, nor another argument.

    >>> proc_argv(0) is None
    True
    """
    raw = read_bytes(f"/proc/{pid}/cmdline")
    return None if raw is None else split_argv(raw)


def split_argv(raw):
    r"""The arguments of a /proc/<pid>/cmdline's bytes ``raw``, each :func:`as_text`.

    >>> split_argv(b"python3\0caf\xe9.txt\0")
    ['python3', 'caf\\xe9.txt']
    """
    return [as_text(a) for a in raw.split(b"\0")[:-1]]


def mtime(path):
    """The modification time of ``path`` in whole seconds, or None when it does not exist."""
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return None


def digest(path):
    """The sha256 of ``path``'s bytes, or None when it cannot be read."""
    data = read_bytes(path)
    return None if data is None else hashlib.sha256(data).hexdigest()
