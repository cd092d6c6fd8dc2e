"""DESIGN's speed targets on a deployed site, as counts of remote commands (not timings).

How commands are counted:

- container commands: the sim's pct log (``node.pct_calls()``). Every command pvegpu runs in a
  container (facts, operations, file transfers of the @pct connector) is one
  ``pct exec <vmid> -- env -i ...`` call. The node's own probe also looks into the container
  (``pct exec <vmid> -- sh -c ...``, the container's view of the driver, and the container reads
  folded into it: pvegpu.run.ct_reads); those calls are part of a node command, and are counted too:
  every ``pct exec`` of the run is within the budget.
- node commands: pyinfra's ``--debug`` log, which names the host of every SSH command it runs
  ("Running command on <host>: ..."; facts, operations and the training unit's leftover clearing
  on the node alike) and logs every SFTP upload ("Attempting upload of ..."). Container commands
  travel over the node's SSH too but are logged under their ``@pct/...`` host, so they are left
  out. A pct call that is not ``exec`` (create, set, start, push, ...) is always node-side: a
  converged run makes none.
"""

from __future__ import annotations

import base64
import re

CU128, CU130 = "torch-2.11.0-cu128", "torch-2.11.0-cu130"
BASELINE = "/var/lib/pvegpu/baseline-packages"


def counted(site, script="deploy.py", *data):
    """Run `script` with --debug; return (run, container commands, all pct exec calls, other pct
    calls, node commands)."""
    site.node.clear_pct_log()
    run = site.pyinfra(script, *data, extra=("--debug",))
    calls = [c["argv"] for c in site.node.pct_calls()]
    execs = [a for a in calls if a[0] == "exec"]
    container = [a for a in execs if a[3:5] == ["env", "-i"]]
    other = [a for a in calls if a[0] != "exec"]
    node = re.findall(r"Running command on (?!@pct/)\S+: \(pty=\w+\) (.*)", run.stderr)
    node += re.findall(r"Attempting upload of (.*)", run.stderr)
    return run, container, execs, other, node


def handshakes(run) -> list[str]:
    """The SSH connections a run opened, by address: pyinfra's --debug log names each handshake
    of its SSH connector ("Connecting to: <address> (...)"), the @pct hosts' own included."""
    return re.findall(r"Connecting to: (\S+) \(", run.stderr)


def describe(command: str) -> str:
    """A readable form of a command: a probe by its first comment line, else its start."""
    m = re.search(r"b64decode\(\W*([A-Za-z0-9+/=]{40,})", command)
    if m:
        source = base64.b64decode(m.group(1) + "==").decode(errors="replace").splitlines()
        return "probe: " + next((ln[2:] for ln in source if ln.startswith("# ")), "?")[:120]
    return " ".join(command.split())[:120]


def report(what, container, execs, other, node):
    lines = [
        f"{what}: {len(container)} container commands, {len(execs)} pct exec calls in all, "
        f"{len(other)} other pct calls, {len(node)} node commands"
    ]
    lines += [f"  ct   {describe(a[-1])}" for a in container]
    lines += [f"  exec {describe(' '.join(a))}" for a in execs if a not in container]
    lines += [f"  pct  {describe(' '.join(a))}" for a in other]
    lines += [f"  node {describe(c)}" for c in node]
    text = "\n".join(lines)
    print(text)
    return text


def test_noop_verify_and_swap_back_stay_within_designs_command_budgets(site):
    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    assert site.ct("test", "-s", BASELINE).returncode == 0

    # A converged re-run: no change, one read of the node (the preflight's, with the training
    # code's paths; the node stage and verify reuse it: pvegpu.run.node_read) and its one pct exec:
    # the container's own view of the driver, then its python-env state and its verification
    # (pvegpu.run.ct_reads), so no container command of its own.
    run, container, execs, other, node = counted(site)
    why = report("no-op re-run", container, execs, other, node)
    assert run.rc == 0, run.output[-4000:]
    assert run.changed == 0, run.json
    assert len(container) == 0 and len(execs) <= 1, why
    assert len(node) <= 1 and other == [], why
    # one SSH connection to the node: the container host shares the node host's
    assert handshakes(run) == ["127.0.0.1"], why

    # Verify only: one remote command, so one SSH session: the node read, whose one pct exec
    # into the container runs its verification read (no view; ct_detail "reads"); no container
    # command of its own.
    run, container, execs, other, node = counted(site, "verify.py")
    why = report("verify.py", container, execs, other, node)
    assert run.rc == 0, run.output[-4000:]
    assert len(container) == 0 and len(execs) == 1, why
    assert len(node) == 1 and other == [], why
    assert handshakes(run) == ["127.0.0.1"], why

    # Swap to a new variant (downloads its torch). The package baseline, deleted by hand first, is
    # recorded again in the same run: its existence comes with the composite container fact.
    site.ct("rm", "-f", BASELINE)
    swap, container, execs, other, node = counted(site, "deploy.py", "torch_variant=cu128")
    why = report("swap to a new build", container, execs, other, node)
    assert swap.rc == 0, swap.output[-4000:]
    # the baseline, the build with the state after it (read in the same exec: change_then_read),
    # the caches, the new build's torch check, its promotion with verify's read; the node read
    # again by verify after the build, and once more (with its pct exec) right before the switch
    # of the live venv, which that exec makes when the check on that read finds no training (a
    # training started during the build must be seen before it; pvegpu.run.gated)
    assert len(container) <= 5 and len(execs) <= 7, why
    assert len(node) <= 3 and other == [], why
    assert site.ct("readlink", "-f", "/root/venv").stdout.startswith(f"/root/venvs/{CU128}.b")
    assert site.ct("test", "-s", BASELINE).returncode == 0
    assert "dflash-train.service keeps running; restart pending" in swap.output

    # Swap back to the build that is already there, the index stopped: two node reads (the
    # preflight's, with the python-env state and verify's read of the selected build folded in;
    # the node stage and verify reuse it; and the fresh one right before the switch, so that a
    # training started meanwhile is seen, whose pct exec makes the switch of the live link when
    # the check on that read finds none: pvegpu.run.gated) and no container command of its own
    # (verify accepted the build first). The unit file is the same for every variant (each build
    # carries its own settings), so it is not rewritten and systemd not reloaded. Nothing
    # downloaded; the pending restart is gone (it runs cu130).
    unit = site.ct("cat", "/etc/systemd/system/dflash-train.service").stdout
    site.index.stop()
    downloads = site.index.downloads()
    run, container, execs, other, node = counted(site)
    why = report("swap back", container, execs, other, node)
    assert run.rc == 0, run.output[-4000:]
    assert len(container) == 0 and len(execs) == 2, why
    assert len(node) == 2 and other == [], why
    assert not any("daemon-reload" in " ".join(a) for a in execs), why
    assert site.index.downloads() == downloads
    assert site.ct("readlink", "-f", "/root/venv").stdout.startswith(f"/root/venvs/{CU130}.b")
    assert "restart pending" not in run.output
    assert site.ct("cat", "/etc/systemd/system/dflash-train.service").stdout == unit
    env = site.ct("cat", "/root/venv/.pvegpu-train.env").stdout
    assert CU128 not in env and f"/data/cache/{CU130}/inductor" in env

    # What the swap back reused from its one read of the container left nothing undone.
    again = site.deploy()
    assert again.rc == 0 and again.changed == 0, again.output[-4000:]

    # Swap to the other build, now also there: the same as a swap back.
    run, container, execs, other, node = counted(site, "deploy.py", "torch_variant=cu128")
    why = report("swap to a built variant", container, execs, other, node)
    assert run.rc == 0, run.output[-4000:]
    assert len(container) == 0 and len(execs) == 2, why
    assert len(node) == 2 and other == [], why
    assert site.ct("readlink", "-f", "/root/venv").stdout.startswith(f"/root/venvs/{CU128}.b")
