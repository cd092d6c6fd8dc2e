"""The container's verification fact: torch runtime, its GPUs, driver userspace, the venv's
packages and (optionally) the concurrent compile check, from ONE remote command.

DESIGN.md "Speed": verify-only may use at most 3 container commands, and every `pct exec` pays
Perl start-up on a real node, so the container's whole view comes back as one JSON document
(``probes/verification.py``). Raw nvidia-smi output inside it is parsed here, on the controller,
with the strict parsers of :mod:`pvegpu.facts.gpus`.
"""

from __future__ import annotations

from pyinfra.api.exceptions import FactProcessError

from ..documents import ContainerVerificationDoc
from .gpus import GPU_QUERY, library_version, module_version, parse_smi
from .probe import ProbeFact, parse_probe_output, probe_source

#: Keys the probe must always print; anything else missing means a broken probe, not a fact.
REQUIRED = (
    "venv",
    "python",
    "present",
    "libs",
    "smi",
    "torch",
    "compile",
    "packages",
    "pip_check",
    "module_text",
)


def shape(doc: dict) -> ContainerVerificationDoc:
    """Validate the probe's document and add the parsed views (``gpus``, driver versions).

    >>> d = shape({"venv": "/root/venv", "python": "/root/venv/bin/python", "present": False,
    ...            "libs": {"libcuda.so.1": None}, "smi": {"rc": 127, "stdout": "",
    ...            "stderr": "nvidia-smi: not found"}, "torch": None, "compile": None,
    ...            "packages": None, "pip_check": None, "module_text": []})
    >>> d["gpus"], d["driver"]["libcuda"], d["gpu_error"]
    (None, None, 'nvidia-smi is not installed')
    """
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise FactProcessError(f"verification probe: missing {', '.join(missing)} in its answer")
    if doc["torch"] is not None and not isinstance(doc["torch"], dict):
        raise FactProcessError("verification probe: torch is not an object")
    if doc["packages"] is not None and not isinstance(doc["packages"], dict):
        raise FactProcessError("verification probe: packages is not an object")
    if doc.get("unit") is not None and not isinstance(doc["unit"], dict):
        raise FactProcessError("verification probe: unit is not an object")
    if doc.get("beside_training") is not None and not isinstance(doc["beside_training"], dict):
        raise FactProcessError("verification probe: beside_training is not an object")
    try:
        smi = parse_smi(doc["smi"], "gpus")
    except FactProcessError as e:
        # The container's own nvidia-smi is a witness "where available": with some GPUs not
        # passed through, real nvidia-smi prints "Unable to determine the device handle for GPU
        # ..." lines among the rows. Keep that as data; the parser stays strict.
        smi = {"rows": None, "error": f"unreadable nvidia-smi answer ({e})"}
    libs = doc["libs"] or {}
    smi_driver = next(
        (r["driver_version"] for r in smi["rows"] or [] if r.get("driver_version")), None
    )
    return {
        **doc,
        "gpus": smi["rows"],
        "gpu_error": smi["error"],
        "driver": {
            "libcuda": library_version(libs.get("libcuda.so.1"), "libcuda"),
            "libnvidia_ml": library_version(libs.get("libnvidia-ml.so.1"), "libnvidia-ml"),
            "smi": smi_driver,
            "module": module_version(" ".join(doc["module_text"] or [])),
        },
    }


class ContainerVerification(ProbeFact):
    """What a training container sees: torch (in ``venv``), GPUs, driver userspace, packages.

    .. code:: python

        v = host.get_fact(ContainerVerification, venv="/root/venv",
                          uv_bin="/opt/pvegpu/uv-0.9.5/bin/uv", compile_check=False)
        v["torch"]["version"], v["driver"]["libcuda"], v["gpus"][0]["uuid"], v["packages"]["torch"]
        # ('2.11.0+cu130', '580.95.05', 'GPU-5a1e0000-...', '2.11.0+cu130')

    ``torch`` is :class:`pvegpu.facts.torch.TorchRuntime`'s document (None without a venv);
    ``compile`` the concurrent compile check's (``probes/compile_check.py``) when asked for.
    ``unit`` (with ``unit_name``): the training unit's ``active`` state, its start record
    (``started``, read from ``started_path``) and the time ``build_venv`` was built (``built``).
    ``read_only``: write nothing at all, not even uv's cache (verify.py).
    ``beside_training``: whether a training runs in the container (its unit, or a process of
    ``training_matcher``'s command) and the GPUs it holds: torch makes no CUDA context there
    (``context: false`` on those devices), and the compile check refuses to run unless
    ``compile_beside_training`` (deploy.py with ``restart_training=true``).
    """

    probe = "verification"

    def command(
        self,
        venv,
        uv_bin=None,
        compile_check=False,
        compile_gpus=None,
        timeout=600,
        unit_name=None,
        started_path=None,
        build_venv=None,
        read_only=False,
        training_matcher=None,
        compile_beside_training=False,
    ):
        return self.command_for(
            venv=venv,
            read_only=read_only,
            training_matcher=training_matcher,
            compile_beside_training=compile_beside_training,
            uv_bin=uv_bin,
            unit_name=unit_name,
            started_path=started_path,
            build_venv=build_venv,
            torch_inner=probe_source("torch_inner"),
            compile_inner=probe_source("compile_check") if compile_check else None,
            compile_args={
                "gpus": list(compile_gpus) if compile_gpus is not None else None,
                "timeout": timeout,
            },
            smi_query=",".join(GPU_QUERY),
            timeout=timeout,
        )

    def process(self, output) -> ContainerVerificationDoc:
        return shape(parse_probe_output(self.probe, list(output)))
