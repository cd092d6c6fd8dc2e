# Action script (not a read-only probe): on the Proxmox NODE, stop one recognised training of a
# container gracefully and whole, with consent (restart_training=true). Runs with the node's system
# python3 (stdlib only), after probes/ct_processes.py (/proc/<pid>/stat read as the node probe reads
# it). ARGS (a JSON string) is prepended (pvegpu.plan.takeover.stop_args):
# {"vmid": 200, "members": [{"pid": 4242, "start": 123456, "role": "launcher|worker|helper"}],
#  "unit": "train.service" or null, "unit_uid": null or the uid whose user manager runs it,
#  "timeout_s": 900, "log": "/var/log/pvegpu/...log",
#  "gpus": [0, 1], "command": "torchrun ..."}
#
# Order (pvegpu.plan.takeover), whatever started the training: launchers held (SIGSTOP: torchrun
# would SIGKILL its workers 30 s after it forwards a signal, and forwards it to each worker's
# whole process group; a wrapper loop would start the trainer again); every other member
# continued (SIGCONT: a trainer paused with ctrl-Z cannot checkpoint while stopped); the workers,
# and only they, sent SIGTERM, all at once (a DataLoader worker dies by anyone's SIGTERM but its
# parent's, and its trainer then raises before its checkpoint); up to timeout_s, or the unit's own
# TimeoutStopSec when longer, for the workers to exit; then the unit that is the training (if
# any) stopped and kept from starting again inside the container, by the means its kind has
# (`systemctl disable --now`; a transient unit, which has no file, `systemctl stop`; a unit of a
# user's manager through that manager), which signals what is left; else the launchers ended
# (SIGTERM, SIGCONT); then SIGKILL to any member still there. A pid is signalled only while it
# is the same process (its start time, /proc/<pid>/stat field 22): a reused pid is never touched.
# Every signal is appended to `log` (one JSON line). Prints one JSON line: stopped, killed,
# remaining, unit_rc; exits 1 (with one line on stderr) when anything of the training remains.
import fcntl
import json
import os
import re
import signal
import sys
import time

from pvegpu.probes.prelude import proc_argv, run  # sent as the prelude

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)
GRACE_S = 15  # what a launcher or wrapper gets once its workers are gone
STOP_LOCK = "/run/lock/pvegpu-stop.lock"  # held while a stop runs (node_lock waits for it)
NOT_LOADED = 5  # systemctl's exit status for a unit that is not loaded (a transient one, gone)


def start_time(pid):
    """Field 22 of /proc/<pid>/stat, None when gone or a zombie (its exit already happened)."""
    return (proc_fields(pid) or {}).get("start")  # noqa: F821 (probes/ct_processes.py)


def alive(member):
    """The member still runs as the same process."""
    return member.get("start") is not None and start_time(member["pid"]) == member["start"]


def log(member, sig):
    entry = {
        "time": round(time.time(), 3),
        "vmid": A["vmid"],
        "pid": member["pid"],
        "role": member["role"],
        "signal": sig,
        "gpus": A.get("gpus") or [],
        "argv": proc_argv(member["pid"]) or [],
        "by": "takeover",
    }
    try:
        os.makedirs(os.path.dirname(A["log"]), exist_ok=True)
        with open(A["log"], "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
    except OSError:
        pass


def send(members, sig):
    """Signal every member that still is itself; the ones signalled."""
    sent = []
    for m in members:
        if not alive(m):
            continue
        log(m, sig.name)
        try:
            os.kill(m["pid"], sig)
            sent.append(m["pid"])
        except ProcessLookupError:
            pass
    return sent


def wait_gone(members, seconds):
    """Wait until none of ``members`` runs, at most ``seconds``; True when all are gone."""
    deadline = time.monotonic() + seconds
    while any(alive(m) for m in members):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
    return True


def unit_manager(argv):
    """``pct exec`` of ``systemctl <argv>`` in the manager that runs the unit: the system's, or
    the user's (``unit_uid``) through runuser, as that user's session would."""
    base = ["pct", "exec", str(A["vmid"]), "--"]
    uid = A.get("unit_uid")
    if uid is None:
        return run(base + ["systemctl", *argv], timeout=None)
    script = (
        f'u=$(getent passwd {int(uid)} | cut -d: -f1) && exec runuser -u "$u" -- '
        f'env XDG_RUNTIME_DIR=/run/user/{int(uid)} systemctl --user "$@"'
    )
    return run(base + ["sh", "-c", script, "sh", *argv], timeout=None)


TIMESPAN = {"us": 1e-6, "ms": 1e-3, "s": 1, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def seconds(span):
    """systemd's timespan (``1min 30s``, ``15min``) in seconds; None: ``infinity`` or unread."""
    total, found = 0.0, False
    for value, unit in re.findall(r"(\d+(?:\.\d+)?)(us|ms|min|s|h|d|w)\b", span or ""):
        total, found = total + float(value) * TIMESPAN[unit], True
    return total if found else None


def unit_facts(unit):
    """(transient, stop timeout in seconds or None) of the unit, from its manager."""
    rc, out, _err = unit_manager(["show", "-p", "Transient", "-p", "TimeoutStopUSec", unit])
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if not rc else {}
    return props.get("Transient") == "yes", seconds(props.get("TimeoutStopUSec"))


def stop_unit(unit, transient):
    """Stop the unit and keep it from starting again, in one remote step of its manager (systemd
    honours the unit's own TimeoutStopSec; no timeout of ours cuts it): `disable --now`, or
    `stop` for a transient unit, which has no unit file to disable."""
    argv = ["stop", unit] if transient else ["disable", "--now", unit]
    rc, out, err = unit_manager(argv)
    if transient and rc == NOT_LOADED:  # its trainer exited, and a transient unit goes with it
        return 0, []
    return rc, (err or out).strip().splitlines()[-1:] if rc else []


def hold_stop_lock():
    """Hold the node's stop lock (``STOP_LOCK``) for as long as this process lives: the deploy
    that started it may be gone (Ctrl-C, a lost connection) while the checkpoints are written,
    and the next deploy's lock holder waits for this lock, so it never signals them again."""
    lock = A.get("stop_lock") or STOP_LOCK  # a test's own path, never this machine's
    try:
        os.makedirs(os.path.dirname(lock), exist_ok=True)
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        with open(lock.removesuffix(".lock") + ".holder", "w") as f:
            f.write(f"the takeover's stop of CT {A['vmid']}'s training (pid {os.getpid()})\n")
        return fd
    except OSError:
        return None


def guard_launchers(launchers):
    """A watchdog in its own session: once this stop process is gone (killed by an admin or the
    OOM killer), it continues every launcher held with SIGSTOP that still is itself, so none
    stays stopped; after a normal end there is nothing left to continue."""
    parent = os.getpid()
    if not launchers or os.fork() != 0:
        return
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the SSH channel never waits for the watchdog
        os.dup2(null, fd)
    while os.getppid() == parent:
        time.sleep(0.5)
    for m in launchers:
        if alive(m):
            try:
                os.kill(m["pid"], signal.SIGCONT)
            except ProcessLookupError:
                pass
    os._exit(0)


signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the deploy's connection may go; the stop goes on
hold_stop_lock()
members = A["members"]
by_role = {r: [m for m in members if m["role"] == r] for r in ("launcher", "worker", "helper")}
started = time.monotonic()
unit, transient, wait_s = A.get("unit"), False, A["timeout_s"]
if unit:
    transient, own = unit_facts(unit)
    wait_s = max(wait_s, own or 0)
guard_launchers(by_role["launcher"])
send(by_role["launcher"], signal.SIGSTOP)
send(by_role["worker"] + by_role["helper"], signal.SIGCONT)
stopped = send(by_role["worker"], signal.SIGTERM)
wait_gone(by_role["worker"], wait_s)
unit_rc, unit_err = 0, []
if unit:
    unit_rc, unit_err = stop_unit(unit, transient)
else:
    rest = by_role["launcher"]
    send(rest, signal.SIGTERM)
    send(rest, signal.SIGCONT)
    wait_gone(rest, max(GRACE_S, A["timeout_s"] - (time.monotonic() - started)))
killed = send(members, signal.SIGKILL)
wait_gone(members, 10)
remaining = [m["pid"] for m in members if alive(m)]
print(
    json.dumps(
        {
            "stopped": stopped,
            "killed": killed,
            "remaining": remaining,
            "unit_rc": unit_rc,
            "unit_error": unit_err,
        }
    )
)
why = f" ({' '.join(unit_err)})" if unit_err else ""
if remaining:
    print(
        f"CT {A['vmid']}: the training ({A.get('command')}) did not stop: pid "
        f"{', '.join(str(p) for p in remaining)} still there{why}; nothing else is changed: "
        "check it in the container",
        file=sys.stderr,
    )
    raise SystemExit(1)
if unit_rc:  # every process is gone; its unit may start it again (at boot, by Restart=)
    print(
        f"CT {A['vmid']}: the training ({A.get('command')}) stopped, but its unit "
        f"{A.get('unit')} could not be stopped and disabled{why}; nothing else is changed: "
        f"disable it in the container (systemctl disable --now {A.get('unit')})",
        file=sys.stderr,
    )
    raise SystemExit(1)
