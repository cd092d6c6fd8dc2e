"""What bench/gpu_reality.py reads from its raw captures, and the Markdown it writes (pure
functions, stdlib only: the GPU machine has no pyinfra; tests/unit/test_gpu_reality.py pins them).

>>> sorted(help_fields('"name" or "gpu_name"\\nThe official product name.\\n\\n"fabric.state"\\n'))
['fabric.state', 'gpu_name', 'name']
"""

from __future__ import annotations

import re

# A field line of `--help-query-gpu` / `--help-query-compute-apps`: `"name" or "gpu_name"`.
FIELD_LINE = re.compile(r'^"[\w.\-]+"(?: or "[\w.\-]+")*$')
QUERY = re.compile(r"--query-(gpu|compute-apps)=([\w.,\-]+)")


def help_fields(text: str) -> set[str]:
    """Every field name (aliases included) a `--help-query-*` answer lists."""
    found: set[str] = set()
    for line in text.splitlines():
        if FIELD_LINE.match(line.strip()):
            found.update(re.findall(r'"([\w.\-]+)"', line))
    return found


def product_queries(sources: dict[str, str]) -> list[tuple[str, tuple[str, ...]]]:
    """(kind, fields) of every nvidia-smi query in ``sources`` ({name: text}), sorted, once each.

    >>> product_queries({"p": 'SMI = ["nvidia-smi", "--query-gpu=uuid,memory.used"]'})
    [('gpu', ('uuid', 'memory.used'))]
    """
    found = set()
    for text in sources.values():
        for kind, fields in QUERY.findall(text):
            found.add((kind, tuple(f for f in fields.split(",") if f)))
    return sorted(found)


def csv_rows(text: str, fields: list[str]) -> list[dict[str, str]]:
    """Rows of a `--format=csv,noheader[,nounits]` answer, split at most len(fields)-1 times
    (nvidia-smi quotes nothing; a free-text field goes last).

    >>> csv_rows("0, Completed, Success\\n", ["index", "fabric.state", "fabric.status"])
    [{'index': '0', 'fabric.state': 'Completed', 'fabric.status': 'Success'}]
    """
    rows = []
    for line in text.splitlines():
        if line.strip():
            cells = [c.strip() for c in line.split(",", len(fields) - 1)]
            rows.append(dict(zip(fields, cells)))
    return rows


def used_by_uuid(text: str) -> dict[str, int]:
    """{uuid: MiB} of `--query-gpu=uuid,memory.used --format=csv,noheader,nounits`.

    >>> used_by_uuid("GPU-a, 0\\nGPU-b, 511\\nGPU-c, [N/A]\\n")
    {'GPU-a': 0, 'GPU-b': 511}
    """
    return {
        r["uuid"]: int(r["used"])
        for r in csv_rows(text, ["uuid", "used"])
        if r.get("used", "").isdigit()
    }


def rows_of_pid(text: str, pid: int) -> list[dict[str, str]]:
    """This process's rows of `--query-compute-apps=pid,used_memory,gpu_uuid` (noheader).

    >>> rows_of_pid("41, 500, GPU-a\\n7, 9, GPU-b\\n", 41)
    [{'pid': '41', 'used_memory': '500', 'gpu_uuid': 'GPU-a'}]
    """
    return [
        r for r in csv_rows(text, ["pid", "used_memory", "gpu_uuid"]) if r.get("pid") == str(pid)
    ]


def context_sizes(run: dict) -> list[dict]:
    """Per GPU of a context run (``pid``, ``before``/``after`` memory.used answers, ``apps``):
    the compute-apps ``used_memory`` of the run's own process and the change of memory.used.

    >>> context_sizes({"pid": 5, "before": {"stdout": "GPU-a, 1\\n"},
    ...   "after": {"stdout": "GPU-a, 504\\n"}, "apps": {"stdout": "5, 500, GPU-a\\n"}})
    [{'uuid': 'GPU-a', 'apps_used_mib': 500, 'used_before_mib': 1, 'used_after_mib': 504, \
'delta_mib': 503}]
    """
    before = used_by_uuid((run.get("before") or {}).get("stdout", ""))
    after = used_by_uuid((run.get("after") or {}).get("stdout", ""))
    own = {
        r["gpu_uuid"]: r["used_memory"]
        for r in rows_of_pid((run.get("apps") or {}).get("stdout", ""), run.get("pid", -1))
    }
    out = []
    for uuid in sorted(after):
        used = own.get(uuid)
        out.append(
            {
                "uuid": uuid,
                "apps_used_mib": int(used) if used and used.isdigit() else None,
                "used_before_mib": before.get(uuid),
                "used_after_mib": after[uuid],
                "delta_mib": after[uuid] - before[uuid] if uuid in before else None,
            }
        )
    return out


def nvidia_devices(text: str) -> dict[str, int]:
    """{driver name: major} of the NVIDIA character devices in /proc/devices.

    >>> nvidia_devices("Character devices:\\n  1 mem\\n195 nvidia\\n508 nvidia-uvm\\n")
    {'nvidia': 195, 'nvidia-uvm': 508}
    """
    found = {}
    for line in text.split("Block devices:")[0].splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].startswith("nvidia"):
            found[parts[1]] = int(parts[0])
    return found


def values(rows: list[dict[str, str]], field: str) -> list[str]:
    """The distinct values of ``field`` in ``rows``, sorted.

    >>> values([{"s": "N/A"}, {"s": "N/A"}, {"s": "Completed"}], "s")
    ['Completed', 'N/A']
    """
    return sorted({r[field] for r in rows if field in r})


def check(name, expected, found, ok) -> dict:
    return {"name": name, "expected": expected, "found": found, "ok": ok}


def torch_checks(steps: dict) -> list[dict]:
    facts, ctx = steps.get("torch") or {}, steps.get("contexts") or {}
    none, made = ctx.get("no_context") or {}, ctx.get("context") or {}
    sizes = made.get("sizes") or []
    return [
        check(
            "device counts",
            "torch.cuda.device_count() (NVML first) = cudaGetDeviceCount",
            f"{facts.get('nvml_first')} / {facts.get('cuda_count')}",
            facts.get("nvml_first") == facts.get("cuda_count")
            if facts.get("cuda_count") is not None
            else None,
        ),
        check(
            "no-context path",
            "no primary context, no compute-apps row of the probe",
            f"contexts {none.get('primary')}, own rows {len(none.get('own_rows') or [])}",
            not any(none.get("primary") or [True]) and not none.get("own_rows")
            if "pid" in none
            else None,
        ),
        check(
            "context size (MiB)",
            "compute-apps used_memory of the probe, memory.used before/after",
            "; ".join(
                f"{s['apps_used_mib']} ({s['used_before_mib']} -> {s['used_after_mib']})"
                for s in sizes
            ),
            bool(sizes) and all(s["apps_used_mib"] for s in sizes),
        ),
        check(
            "Triton links",
            "-l:libcuda.so.1 from Triton 3.6 (-lcuda before: needs libcuda.so)",
            f"Triton {facts.get('triton')}: {facts.get('triton_libraries')}, "
            f"links {facts.get('libcuda_links')}",
            None,
        ),
    ]


def smi_checks(steps: dict) -> list[dict]:
    q = steps.get("queries") or {}
    vals = q.get("values") or {}
    bad = [x for x in q.get("queries") or [] if x["rc"] != 0 or x.get("unknown")]
    fabric = set(vals.get("fabric.state") or [])
    return [
        check(
            "pvegpu's nvidia-smi queries",
            "every field in --help-query-*, exit 0",
            f"{len(q.get('queries') or [])} queries, refused: {bad or 'none'}",
            not bad if q else None,
        ),
        check(
            "fabric.state / fabric.status",
            "N/A without NVSwitch; Not Started, In Progress, Completed",
            f"{sorted(fabric)} / {vals.get('fabric.status')}",
            fabric <= {"N/A", "Not Supported", "Not Started", "In Progress", "Completed"}
            if fabric
            else None,
        ),
        check(
            "compute_mode",
            "Default, Exclusive_Process, Prohibited",
            vals.get("compute_mode"),
            set(vals.get("compute_mode") or []) <= {"Default", "Exclusive_Process", "Prohibited"},
        ),
        check(
            "persistence_mode",
            "Enabled, Disabled",
            vals.get("persistence_mode"),
            set(vals.get("persistence_mode") or []) <= {"Enabled", "Disabled"},
        ),
        check(
            "parsed by pvegpu",
            "GPU rows and compute apps parse",
            f"{len((q.get('gpu_rows') or {}).get('rows') or [])} GPUs, "
            f"{len((q.get('app_rows') or {}).get('rows') or [])} apps",
            bool((q.get("gpu_rows") or {}).get("rows")),
        ),
    ]


def other_checks(steps: dict) -> list[dict]:
    cap, held, comp = (
        steps.get("captures") or {},
        steps.get("holder") or {},
        steps.get("compile") or {},
    )
    ours = {str(d.get("uuid") or "").lower(): d for d in held.get("devices") or []}
    held_uuids = (held.get("beside_training") or {}).get("held") or []
    no_ctx = [u for u in held_uuids if (ours.get(u) or {}).get("context") is False]
    out = [
        check(
            "/proc and /dev",
            "version, gpus/*/information, /proc/devices, /dev/nvidia*",
            f"{cap.get('files')}, {len(cap.get('dev') or {})} device nodes, "
            f"majors {cap.get('proc_devices')}",
            None,
        ),
        check(
            "held GPU",
            "the holder's GPU held, no context of the probe there",
            f"held {held_uuids}, without context {no_ctx}",
            bool(held_uuids) and no_ctx == held_uuids if "devices" in held else None,
        ),
    ]
    for name in ("cold", "warm"):
        c = comp.get(name) or {}
        out.append(
            check(
                f"compile check, {name} cache",
                "ok (flex_attention compiles on every GPU)",
                f"ok={c.get('ok')} in {c.get('seconds')} s; {c.get('error') or ''}",
                c.get("ok") if c else None,
            )
        )
    return out


def environment(steps: dict) -> dict:
    node, facts = steps.get("node") or {}, steps.get("torch") or {}
    return {
        "driver": node.get("driver_version"),
        "torch": facts.get("torch") or (steps.get("torchrun_options") or {}).get("torch"),
        "triton": facts.get("triton"),
        "gpus": [str(g.get("name")) for g in node.get("gpus") or []],
    }


def checks(steps: dict) -> list[dict]:
    """Every check of a run's steps: what the product expects beside what was found."""
    return torch_checks(steps) + smi_checks(steps) + other_checks(steps)


def markdown(report: dict) -> str:
    """The report in Markdown: what was found beside what the product expects."""
    env = report.get("environment") or {}
    lines = [
        f"# GPU reality check, {report.get('date', '?')}",
        "",
        f"- {report.get('verdict', '?')}",
        f"- driver {env.get('driver') or '?'}, torch {env.get('torch') or '?'}, "
        f"Triton {env.get('triton') or '?'}, GPUs: {', '.join(env.get('gpus') or []) or 'none'}",
        f"- took {report.get('seconds', '?')} s; raw captures in `raw/`, every value in "
        "`report.json`",
        "",
        "| check | expected | found | as expected |",
        "|---|---|---|---|",
    ]
    for check in report.get("checks") or []:
        ok = {True: "yes", False: "**NO**", None: "n/a"}[check.get("ok")]
        found = str(check.get("found")).replace("|", "/").replace("\n", " ")
        lines.append(f"| {check['name']} | {check['expected']} | {found} | {ok} |")
    for name, step in (report.get("steps") or {}).items():
        if isinstance(step, dict) and step.get("error"):
            lines += ["", f"- step {name} failed: {step['error']}"]
        elif isinstance(step, dict) and step.get("skipped"):
            lines += ["", f"- step {name} skipped: {step['skipped']}"]
    return "\n".join(lines) + "\n"
