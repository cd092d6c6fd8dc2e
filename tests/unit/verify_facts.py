"""Facts shaped like the real ones, for the verification unit tests."""

from pvegpu.settings import Settings, defaults

UUID = "5a1e{0}{0}{0}{0}-5157-4e4f-9d1a-0c0ffee0000{0}"


def settings(**over):
    return Settings.from_data({**defaults(), "training_requirements": [], **over})


def node_facts(gpus=8, driver="580.95.05", apps=()):
    return {
        "driver_version": driver,
        "gpus": [
            {
                "index": i,
                "name": "NVIDIA H200",
                "uuid": "GPU-" + UUID.format(i),
                "memory_total_mib": 143771,
                "pci_bus_id": f"00000000:{i:02X}:00.0",
            }
            for i in range(gpus)
        ],
        "gpu_error": [],
        "compute_apps": list(apps),
    }


# What the verification probe reads in a container with Debian 12's gcc and libpython3.11-dev.
TOOLCHAIN = {
    "cc": "/usr/bin/gcc",
    "cc_version": "12.2.0",
    "python_include": "/usr/include/python3.11",
    "python_h": True,
}


def ct_facts(
    gpus=range(8),
    version="2.11.0+cu130",
    cuda="13.0",
    libcuda="580.95.05",
    free=143771,
    packages=None,
):
    devices = [
        {
            "index": n,
            "name": "NVIDIA H200",
            "uuid": UUID.format(i),
            "total_mib": 143771,
            "free_mib": free,
            "capability": "9.0",
            "sm_count": 132,
        }
        for n, i in enumerate(gpus)
    ]
    return {
        "venv": "/root/venv",
        "venv_real": "/root/venvs/torch-2.11.0-cu130",
        "python": "/root/venv/bin/python",
        "present": True,
        "torch": {
            "version": version,
            "variant": version.partition("+")[2],
            "cuda": cuda,
            "available": True,
            "init_error": None,
            "device_count": len(devices),
            "devices": devices,
            "arch_list": ["sm_80", "sm_90", "sm_100", "sm_120"],
            "cudnn": 91300,
            "nccl": "2.27.7",
            "import_error": None,
        },
        "driver": {"libcuda": libcuda, "libnvidia_ml": libcuda, "smi": None, "module": "580.95.05"},
        "gpus": None,
        "gpu_error": None,
        "packages": packages
        if packages is not None
        else {"torch": {"version": version, "requires": []}},
        "pip_check": {
            "rc": 0,
            "output": "Checked 1 package in 1ms\nAll installed packages are compatible",
        },
        "compile": None,
        "toolchain": dict(TOOLCHAIN),
    }
