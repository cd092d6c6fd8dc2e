# Prelude of the node probe (node_state.py, which pvegpu.facts.probe appends, after ct_view.py): a
# change made in a container's one exec right after its view, only when the gates' check, run
# here on this very read of the node, finds no training the change must wait for
# (pvegpu.run.gated). The exec runs the view and its reads with no stdin, prints a gate line,
# then reads one line from its stdin: "go" runs the change; anything else runs nothing ("no",
# or the end of its stdin when this probe ended or was killed). Fail closed: a check that cannot
# run, a view that did not reach its gate, or no word at all, and nothing changes.
import subprocess
import sys
import threading
import types

GATE = """
echo "pvegpu-gate"
pvegpu_go=; IFS= read -r pvegpu_go
if [ "$pvegpu_go" = go ]; then
echo "pvegpu-act"
(
%(change)s
)
pvegpu_rc=$?; echo; echo "pvegpu-act-end $pvegpu_rc"
fi
"""


def gated_script(script, change):
    """``script`` (the view and its reads) with no stdin, then the gate, then ``change``."""
    return "{\n" + script + "\n} </dev/null\n" + GATE % {"change": change}


class Gated:
    """A started exec that waits at its gate: its stdout read line by line (a thread) and its
    stderr drained (another), so the probe reads the view while the exec waits for its word."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = []  # its stdout lines so far
        self.err = []
        self.gate = None  # the index of the gate line in lines, once printed
        self.at_gate = threading.Event()
        self.done = threading.Event()
        threading.Thread(target=self._out, daemon=True).start()
        self.err_reader = threading.Thread(target=self._err, daemon=True)
        self.err_reader.start()

    def _out(self):
        try:
            for line in self.proc.stdout:
                line = line[:-1] if line.endswith("\n") else line
                if self.gate is None and line == "pvegpu-gate":
                    self.gate = len(self.lines)
                    self.at_gate.set()
                self.lines.append(line)
        finally:
            self.at_gate.set()
            self.done.set()

    def _err(self):
        self.err.append(self.proc.stderr.read())

    def to_gate(self, timeout):
        """``finish_view``'s (exit status, stdout, stderr) of the part before the gate."""
        if not self.at_gate.wait(timeout):
            self.proc.kill()
            self.done.wait(5)
            return 124, "\n".join(self.lines), "pct: timed out"
        if self.gate is None:  # it ended without reaching its gate (e.g. a stopped container)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.done.wait(5)
            self.err_reader.join(5)
            return self.proc.returncode, "\n".join(self.lines), "".join(self.err)
        return 0, "\n".join(self.lines[: self.gate]) + "\n", ""

    def answer(self, go, timeout=600):
        """Say ``go`` (True: run the change) and wait for the exec's end: {"ran": whether the
        change started, "rc": its exit status (None: unknown), "output": its stdout lines,
        "errors": the exec's stderr lines}."""
        found = {"ran": False, "rc": None, "output": [], "errors": []}
        if self.gate is None:  # never at its gate: it runs nothing, whatever it is told
            return found
        try:
            self.proc.stdin.write("go\n" if go else "no\n")
            self.proc.stdin.close()
        except (OSError, ValueError):  # it ended already (a closed pipe): it runs nothing
            pass
        if not self.done.wait(timeout):
            self.proc.kill()
            self.done.wait(5)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.err_reader.join(5)
        found["errors"] = "".join(self.err).splitlines()[-50:]
        after = self.lines[self.gate + 1 :]
        if "pvegpu-act" not in after:
            return found
        body = after[after.index("pvegpu-act") + 1 :]
        found["ran"] = True
        ends = [i for i, line in enumerate(body) if line.startswith("pvegpu-act-end ")]
        if ends:
            rc = body[ends[-1]].rsplit(" ", 1)[1]
            found["rc"] = int(rc) if rc.isdigit() else None
            body = body[: ends[-1]]
            if body and body[-1] == "":
                body = body[:-1]
        found["output"] = body
        return found


_CHECK: dict = {}


def check_module(bundle):
    """The gates' check (pvegpu.plan.running_training and the modules it imports), loaded from
    the sources the controller sent (pvegpu is not installed on the node), once."""
    if "module" not in _CHECK:
        for name in bundle["packages"]:
            package = types.ModuleType(name)
            package.__path__ = []
            sys.modules[name] = package
        for name, values in bundle["stubs"].items():  # constants of a module not sent
            stub = types.ModuleType(name)
            for key, value in values.items():
                setattr(stub, key, tuple(value) if isinstance(value, list) else value)
            sys.modules[name] = stub
        for name, source in bundle["modules"]:
            module = types.ModuleType(name)
            module.__package__ = name.rpartition(".")[0]
            sys.modules[name] = module
            exec(compile(source, name, "exec"), module.__dict__)
        _CHECK["module"] = sys.modules[bundle["check"]]
    return _CHECK["module"]


def gate_clear(doc, vmid, spec, bundle):
    """(whether the change may run by the node read ``doc``: no training it waits for, why not
    when the check itself failed)."""
    try:
        check = check_module(bundle)
        found = check.running_in_read(int(vmid), doc, spec["unit"], spec.get("match"))
        return not check.others(found), None
    except Exception as e:  # noqa: BLE001 (fail closed: a check that cannot run says no)
        return False, f"{type(e).__name__}: {e}"


def gated_changes(args):
    """{vmid: {"line": container shell line, "unit", "match"}} and the check's sources: what
    the controller sent on stdin with the reads (probes/ct_view.py's ``stdin_doc``)."""
    act = stdin_doc(args).get("act") or {}  # noqa: F821 (probes/ct_view.py)
    return act.get("changes") or {}, act.get("check")


def run_gated(doc, views, changes, bundle):
    """Each gated change: checked on ``doc``, run or not, its outcome under its container's
    ``change``."""
    for vmid, spec in changes.items():
        gated = views.get(int(vmid))
        entry = (doc.get("containers") or {}).get(str(vmid))
        if gated is None or entry is None:
            continue
        if entry.get("status") != "running" or entry.get("live") is None:
            clear, error = False, "the container's view was not read"
        elif not bundle:
            clear, error = False, "no check was sent"
        else:
            clear, error = gate_clear(doc, vmid, spec, bundle)
        entry["change"] = {**gated.answer(clear), "clear": clear, "check_error": error}
