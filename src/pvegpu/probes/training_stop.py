# Action script (not a read-only probe): on the Proxmox NODE, stop one recognised training of a
# container gracefully and whole, with consent (restart_training=true). Runs with the node's system
# python3 (stdlib only), after probes/ct_processes.py (/proc/<pid>/stat read as the node probe reads
# it). ARGS (a JSON string) is prepended (pvegpu.plan.takeover.stop_args):
# {"vmid": 200, "members": [{"pid": 4242, "start": 123456, "role": "launcher|worker|helper"}],
#  "unit": "train.service" or null, "timeout_s": 900, "log": "/var/log/pvegpu/...log",
#  "gpus": [0, 1], "command": "torchrun ..."}
#
# Order (pvegpu.plan.takeover; a unit with no launcher goes straight to its own stop below):
# launchers held (SIGSTOP: torchrun would SIGKILL its workers 30 s
# after it forwards a signal, a wrapper loop would start the trainer again); every other member
# continued (SIGCONT: a trainer paused with ctrl-Z cannot checkpoint while stopped), workers sent
# SIGTERM; up to timeout_s for the workers to exit; then the unit that is the training (if any)
# stopped and disabled in one `systemctl disable --now` inside the container (its own
# TimeoutStopSec; systemd sends SIGTERM and SIGCONT to what is left), else the launchers ended
# (SIGTERM, SIGCONT); then SIGKILL to any member still there. A pid is signalled only while it
# is the same process (its start time, /proc/<pid>/stat field 22): a reused pid is never touched.
# Every signal is appended to `log` (one JSON line). Prints one JSON line: stopped, killed,
# remaining, unit_rc; exits 1 (with one line on stderr) when anything of the training remains.
import json
import os
import signal
import time

from pvegpu.probes.prelude import proc_argv, run  # sent as the prelude

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)
GRACE_S = 15  # what a launcher or wrapper gets once its workers are gone


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


def stop_unit(unit):
    """`systemctl disable --now` of the unit inside the container: disabled and stopped in one
    remote step (systemd honours the unit's own TimeoutStopSec; no timeout of ours cuts it)."""
    rc, out, err = run(
        ["pct", "exec", str(A["vmid"]), "--", "systemctl", "disable", "--now", unit],
        timeout=None,
    )
    return rc, (err or out).strip().splitlines()[-1:] if rc else []


members = A["members"]
by_role = {r: [m for m in members if m["role"] == r] for r in ("launcher", "worker", "helper")}
started = time.monotonic()
stopped = []
# a unit whose workers are its own main processes is left to systemd's stop (its KillMode and
# TimeoutStopSec; no Restart= after a stop it was asked for); only launchers need holding
if by_role["launcher"] or not A.get("unit"):
    send(by_role["launcher"], signal.SIGSTOP)
    send(by_role["worker"] + by_role["helper"], signal.SIGCONT)
    stopped = send(by_role["worker"], signal.SIGTERM)
    wait_gone(by_role["worker"], A["timeout_s"])
unit_rc, unit_err = 0, []
if A.get("unit"):
    unit_rc, unit_err = stop_unit(A["unit"])
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
if remaining or unit_rc:
    what = f"pid {', '.join(str(p) for p in remaining)}" if remaining else A.get("unit")
    why = f" ({' '.join(unit_err)})" if unit_err else ""
    print(
        f"CT {A['vmid']}: the training ({A.get('command')}) did not stop: {what} still there"
        f"{why}; nothing else is changed: check it in the container",
        file=__import__("sys").stderr,
    )
    raise SystemExit(1)
