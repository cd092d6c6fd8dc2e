"""Helpers every probe gets: pvegpu.facts.probe puts this file in front of each probe it sends
(after ARGS) and drops the probe's own import of this module, which is there for readers and
linters only (pvegpu is not installed where probes run). Stdlib only."""

import hashlib
import os
import subprocess

#: Read-only commands started at once by start_early (they run side by side); run() of the same
#: argv collects the started process instead of starting another.
STARTED: dict = {}


def start_early(*argvs, env=None):
    """Start read-only ``argvs`` now (with ``env``, else this process's), to be collected by
    ``run(argv)`` later."""
    for argv in argvs:
        try:
            STARTED[tuple(argv)] = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
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
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except OSError:
        return 127, "", f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out after {timeout} s"
    return p.returncode, p.stdout, p.stderr


def read(path):
    """The text of ``path``, or None when it cannot be read."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def mtime(path):
    """The modification time of ``path`` in whole seconds, or None when it does not exist."""
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return None


def digest(path):
    """The sha256 of ``path``'s bytes, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None
