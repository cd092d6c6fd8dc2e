# Prelude of the node probe (node_state.py, which pvegpu.facts.probe appends): a container's own
# view, from ONE `pct exec` per container that also runs the container reads the controller folds
# into it (pvegpu.run.ct_reads).
import json
import re
import shlex
import subprocess
import sys

from pvegpu.probes.prelude import TEXT  # sent as the prelude

LIBDIR = "/usr/lib/x86_64-linux-gnu"
# First line of every training unit pvegpu renders (pvegpu.plan.unit.UNIT_MARKER): units that
# carry it under another name are earlier training_unit_names (a rename must not run two trainers).
UNIT_MARKER = "# Rendered by pvegpu from templates/training.service.j2"


def module_version(text):
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 ..." (also the
    # "Open Kernel Module for x86_64" wording of the open modules)
    m = re.search(r"Kernel Module(?: for [^ ]+)?\s+(\d+(?:\.\d+)+)", text or "")
    return m.group(1) if m else None


# One sh script inside the container: its kernel-module view, userspace driver, device nodes and
# the training unit. Prefixed lines, parsed below.
CT_SCRIPT = r"""
v=; { read -r v < /proc/driver/nvidia/version; } 2>/dev/null; echo "module $v"
for l in libcuda.so.1 libnvidia-ml.so.1; do echo "lib $l $(readlink %(lib)s/$l 2>/dev/null)"; done
echo "smi $(command -v nvidia-smi)"
set --; for f in /dev/nvidia* /dev/nvidia-caps/*; do [ -c "$f" ] && set -- "$@" "$f"; done
[ $# -eq 0 ] || stat -c 'dev %%n %%t %%T' "$@"
echo "unit $(systemctl is-active %(unit)s 2>/dev/null)"
for t in %(tools)s; do
  f=; IFS=:; for d in $PATH:/bin:/usr/bin:/sbin:/usr/sbin:/usr/X11R6/bin:/usr/bin/X11; do
    [ -f "$d/$t" ] && [ -x "$d/$t" ] && f=1 && break; done; unset IFS
  [ -n "$f" ] || echo "missing $t"; done
cc=$(command -v gcc || command -v clang); v=
[ -z "$cc" ] || v=$({ "$cc" -dumpfullversion 2>/dev/null || "$cc" -dumpversion; } | head -n1)
echo "cc $cc $v"
p=$(readlink /usr/bin/python3 2>/dev/null); p=${p##*/}
echo "pyh $p $([ -n "$p" ] && [ -f "/usr/include/$p/Python.h" ] && echo yes)"
for f in /etc/systemd/system/*.service; do
  [ -f "$f" ] && [ ! -L "$f" ] && [ "${f##*/}" != %(unit)s ] || continue
  case $(head -n1 "$f") in "%(marker)s"*) n=${f##*/}
    echo "other $n $(systemctl is-active "$n" 2>/dev/null)";; esac
done
if [ -d /run/systemd/system ]; then
  o=$(systemctl show --no-pager '*.service' '*.timer' \
    -p Id,ActiveState,SubState,UnitFileState,ExecStart,WorkingDirectory,Triggers 2>&1)
  rc=$?; printf '%%s\n' "$o" | sed 's/^/sd /'; echo "sd-rc $rc"
fi
for f in /run/systemd/transient/*.service /run/user/*/systemd/transient/*.service; do
  [ -f "$f" ] && echo "transient $f"; done
for f in /etc/crontab /etc/cron.d/* /var/spool/cron/crontabs/*; do
  [ -f "$f" ] && grep -s '^[[:space:]]*@reboot' "$f" | sed "s|^|cron $f |"; done
echo "df $(df -Pk / 2>/dev/null | tail -n 1)"
[ -d %(build)s ] && echo "build yes"
[ -d /opt/pvegpu ] && echo "pvegpu-dir yes"
echo "end"
"""
# The folded reads run side by side, each beside the view: each one is a shell function (its
# command in a subshell: an `exit` in it ends only itself), started in the background with its
# stdout and exit status going to a private directory under /tmp (removed at the end). After the
# view, each one's stdout is printed between the markers (the extra echo ends a last line
# without a newline; one empty line is dropped), then its exit status. Without that directory
# (mktemp failed) they run one after the other, as the same functions. The view's own variables
# (d, f, t, ...) are its own: the reads' directory is $pvegpu_d.
READ_FUNCTION = """pvegpu_read_%(i)d() (
%(command)s
)
"""
READS_START = "pvegpu_d=$(mktemp -d /tmp/pvegpu-reads.XXXXXX 2>/dev/null) || pvegpu_d=\n"
READ_START = """[ -z "$pvegpu_d" ] || {
  pvegpu_read_%(i)d > "$pvegpu_d/%(i)d"; echo $? > "$pvegpu_d/%(i)d.rc"; } &
"""
READ_RESULT = """echo "pvegpu-read %(i)d"
if [ -n "$pvegpu_d" ]; then wait; cat "$pvegpu_d/%(i)d"; rc=; read rc < "$pvegpu_d/%(i)d.rc"
else pvegpu_read_%(i)d; rc=$?; fi
echo; echo "pvegpu-read-end %(i)d $rc"
"""
# Every read's files by name in one rm, then the empty directory: no recursive delete
# (pvegpu.guard's rule).
READ_FILES = '"$pvegpu_d/%(i)d" "$pvegpu_d/%(i)d.rc"'
READS_END = '[ -z "$pvegpu_d" ] || { rm -f %(files)s; rmdir "$pvegpu_d"; }\n'
# "missing" lines: the utilities NVIDIA's installer needs that it would not find, looked up as it
# does (misc.c find_system_util: $PATH, then its fixed list; a regular executable file).
# "cc" and "pyh": what Triton needs at torch.compile's first CUDA kernel (runtime/build.py): gcc,
# else clang, on PATH, and Python.h of the system python3 the venvs are made from
# (/usr/include/python3.X: Debian's libpython3.X-dev).


_STDIN_READS: list = []  # what the controller sent on stdin, once read


def stdin_doc(args):
    """The JSON document the controller sent on stdin ({} when it sent none)."""
    if not args.get("reads_on_stdin"):
        return {}
    if not _STDIN_READS:
        _STDIN_READS.append(json.loads(sys.stdin.read() or "{}"))
    return _STDIN_READS[0]


def folded_reads(args):
    """{vmid: [container shell line, ...]}: the folded reads, from stdin when the controller sent
    them there (``reads_on_stdin``: stdin has no argument's 128 KiB limit, so every container's
    reads fit), else from the arguments. With a gated change (probes/ct_gate.py) the reads are
    the document's "reads"."""
    if not args.get("reads_on_stdin"):
        return args.get("reads") or {}
    doc = stdin_doc(args)
    return doc.get("reads") or {} if "act" in doc else doc


def with_reads(view, reads):
    """The exec's script: ``view`` with the folded ``reads`` started before it (side by side)
    and their results printed after it; ``view`` alone when there are none."""
    if not reads:
        return view
    parts = [READ_FUNCTION % {"i": i, "command": c} for i, c in enumerate(reads)]
    parts += [READS_START, *(READ_START % {"i": i} for i in range(len(reads))), view]
    parts += [READ_RESULT % {"i": i} for i in range(len(reads))]
    files = " ".join(READ_FILES % {"i": i} for i in range(len(reads)))
    parts.append(READS_END % {"files": files})
    return "".join(parts)


def start_view(vmid, unit, reads, installer_tools=(), build_dir=None, whole=True, change=None):
    """Start the container's one ``pct exec`` (the view, then ``reads``); None: no pct.
    ``build_dir``: the selected venv build, whose presence the view reports ("build yes").
    ``whole=False``: the reads alone, no view (ct_detail "reads": verify.py's). ``change``: a
    container shell line the exec runs after them only when the probe says so on its stdin
    (probes/ct_gate.py: a :class:`Gated` exec)."""
    tools = " ".join(t for t in installer_tools if re.fullmatch(r"[\w.-]+", t))
    view = CT_SCRIPT % {
        "lib": LIBDIR,
        "unit": unit or "pvegpu-none.service",
        "tools": tools,
        "marker": UNIT_MARKER,
        "build": shlex.quote(build_dir or "/nonexistent/pvegpu-build"),
    }
    script = with_reads(view if whole else 'echo "end"\n', reads)
    if change:
        script = gated_script(script, change)  # noqa: F821 (probes/ct_gate.py)
    argv = ["pct", "exec", str(vmid), "--", "sh", "-c", script]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if change else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **TEXT,  # a byte that is not UTF-8 in what the container prints never fails the view
        )
    except FileNotFoundError:
        return None
    return Gated(proc) if change else proc  # noqa: F821 (probes/ct_gate.py)


def finish_view(proc, timeout=120):
    """(exit status, stdout, stderr) of a started view; on a timeout, what it printed so far.
    A gated exec's: up to its gate (it waits there for the probe's word)."""
    if proc is None:
        return 127, "", "pct: not found"
    if not isinstance(proc, subprocess.Popen):
        return proc.to_gate(timeout)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return 124, out, err + "pct: timed out"


def split_reads(out):
    """(the view's lines up to "end", [{"rc", "stdout"} of each finished read])."""
    lines = out.split("\n")
    if "end" not in lines:
        return lines, []
    cut = lines.index("end")
    view, reads, current = lines[:cut], [], None
    for line in lines[cut + 1 :]:
        if current is None:
            if line == f"pvegpu-read {len(reads)}":
                current = []
        elif line.startswith(f"pvegpu-read-end {len(reads)} "):
            if current and current[-1] == "":
                current.pop()
            rc = line.rsplit(" ", 1)[1]
            reads.append({"rc": int(rc) if rc.isdigit() else None, "stdout": current})
            current = None
        else:
            current.append(line)
    return view, reads


def exec_argvs(value):
    """The argv of each command of a unit's ``ExecStart=`` as `systemctl show` prints it
    (``{ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 /t.py --x ; ignore_errors=no ; ... }``;
    systemd joins argv with spaces, so an argument holding a space reads as two words)."""
    found = []
    for part in value.split("{ path=")[1:]:
        _, _, rest = part.partition(" ; argv[]=")
        argv, sep, _ = rest.rpartition(" ; ignore_errors=")
        if sep:
            found.append(argv.split())
    return found


def parse_units(lines):
    """[{id, active, sub, file_state, exec: [argv, ...], wd, triggers}] from `systemctl show -p
    Id,ActiveState,SubState,UnitFileState,ExecStart,WorkingDirectory,Triggers` (blocks of
    key=value lines separated by blank lines; ``WorkingDirectory=!/d`` and ``-/d``: /d, missing
    allowed)."""
    units, block = [], {}
    for line in [*lines, ""]:
        key, sep, value = line.partition("=")
        if sep:
            block[key] = value
            continue
        if block.get("Id"):
            wd = block.get("WorkingDirectory", "").lstrip("!-") or None
            units.append(
                {
                    "id": block["Id"],
                    "active": block.get("ActiveState") or None,
                    "sub": block.get("SubState") or None,
                    "file_state": block.get("UnitFileState") or None,
                    "exec": exec_argvs(block.get("ExecStart", "")),
                    "wd": "/root" if wd == "~" else wd,
                    "triggers": block.get("Triggers", "").split(),
                }
            )
        block = {}
    return units


def container_view(proc):
    """(status, the container's own view, its reads) from a started view."""
    code, out, err = finish_view(proc)
    view_lines, reads = split_reads(out)
    if "not running" in err and code != 0:
        return "stopped", None, []
    # a view is whole once "end" printed; a read timing out after it (124) leaves it whole
    if "end" not in out.split("\n") or code not in (0, 124):
        return None, None, []
    return "running", parse_view(view_lines), reads


def empty_view() -> dict:
    """The view's keys, before any line of it is read."""
    return {
        "driver_version": None,
        "libs": {},
        "nvidia_smi": False,
        "devices": {},
        "unit_active": None,
        "missing_tools": [],
        "other_units": {},
        "toolchain": {"cc": None, "cc_version": None, "python": None, "python_h": False},
        "root_free_kib": None,
        "build_present": False,
        # the container's units (its systemd's view; [] without systemd as PID 1) and @reboot
        # cron lines: what runs or would start a training (pvegpu.plan.running_training)
        "systemd": False,
        "units": [],
        "units_error": None,
        "crons": [],
        # transient units (systemd-run: no unit file to enable again) of the system's manager
        # (uid None) and of users' own: [[unit, uid], ...] (pvegpu.plan.restart_hint)
        "transient": [],
        # pvegpu's own directory: a container an earlier pvegpu made before the tag existed
        "pvegpu_dir": False,
    }


def parse_view(view_lines: list[str]) -> dict:
    """The container's view from its tagged lines (``module ...``, ``lib ...``, ``sd ...``)."""
    view = empty_view()
    sd_lines = []
    for line in view_lines:
        if line.startswith("sd "):
            sd_lines.append(line[3:])
            continue
        tag, _, rest = line.partition(" ")
        read_line(view, tag, rest, sd_lines)
    if view["systemd"] and not view["units_error"]:
        view["units"] = parse_units(sd_lines)
    elif view["units_error"]:
        view["units"] = None
    return view


def read_line(view: dict, tag: str, rest: str, sd_lines: list[str]) -> None:
    """One tagged line of the view into ``view``."""
    if tag == "module":
        view["driver_version"] = module_version(rest)
    elif tag == "lib":
        name, _, target = rest.partition(" ")
        m = re.search(r"\.so\.(\d+(?:\.\d+)+)$", target.strip())
        view["libs"][name] = m.group(1) if m else None
    elif tag == "smi":
        view["nvidia_smi"] = bool(rest.strip())
    elif tag == "dev":
        parts = rest.split()
        if len(parts) == 3:
            view["devices"][parts[0]] = {"major": int(parts[1], 16), "minor": int(parts[2], 16)}
    elif tag == "unit":
        view["unit_active"] = rest.strip() or None
    elif tag == "missing":
        view["missing_tools"].append(rest.strip())
    elif tag == "cc":
        cc, _, version = rest.partition(" ")
        view["toolchain"]["cc"] = cc or None
        view["toolchain"]["cc_version"] = version.strip() or None
    elif tag == "pyh":
        python, _, found = rest.partition(" ")
        view["toolchain"]["python"] = python or None
        view["toolchain"]["python_h"] = found.strip() == "yes"
    elif tag == "build":
        view["build_present"] = rest.strip() == "yes"
    elif tag == "pvegpu-dir":
        view["pvegpu_dir"] = rest.strip() == "yes"
    elif tag == "df":  # POSIX df -P: ... Available Capacity Mounted-on
        parts = rest.split()
        if len(parts) >= 6 and parts[-3].isdigit():
            view["root_free_kib"] = int(parts[-3])
    elif tag == "sd-rc":
        view["systemd"] = True
        if rest.strip() != "0":
            view["units_error"] = (
                f"systemctl show exited {rest.strip()}: " + " ".join(sd_lines)[:200]
            )
    elif tag == "cron":
        path, _, entry = rest.partition(" ")
        view["crons"].append({"file": path, "line": entry.strip()})
    elif tag == "transient":  # systemd.unit(5): /run/systemd/transient, $XDG_RUNTIME_DIR/...
        m = re.fullmatch(r"/run/(?:user/(\d+)/)?systemd/transient/([^/]+)", rest.strip())
        if m:
            view["transient"].append([m.group(2), int(m.group(1)) if m.group(1) else None])
    elif tag == "other":
        name, _, active = rest.partition(" ")
        view["other_units"][name] = active.strip() or None
