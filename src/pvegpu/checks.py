"""Pure comparisons of facts with expectations: each problem is one line (expectation, fact, fix).

>>> torch_problems({"present": True, "version": "2.11.0+cu128", "cuda": "12.8", "available": True,
...                 "device_count": 8}, "2.11.0", "cu130", "13.0", 8)[0]
'torch is 2.11.0+cu128, expected 2.11.0+cu130: run deploy.py (it rebuilds the venv for torch_variant=cu130)'
"""

from __future__ import annotations


def torch_problems(rt: dict, version: str, variant: str, cuda: str, expected_count: int) -> list[str]:
    """What is wrong with a torch runtime fact, given the configured build."""
    want = f"{version}+{variant}"
    if not rt:
        return ["torch runtime could not be read (container not reachable): run deploy.py"]
    if not rt.get("present"):
        return [f"no venv python at {rt.get('python')}: run deploy.py to build the venv"]
    if rt.get("import_error"):
        return [f"torch does not import in {rt.get('python')} ({rt['import_error']}): run deploy.py --data rebuild=venv"]
    problems = []
    if rt.get("version") != want:
        problems.append(
            f"torch is {rt.get('version')}, expected {want}: run deploy.py "
            f"(it rebuilds the venv for torch_variant={variant})"
        )
    if rt.get("cuda") != cuda:
        problems.append(f"torch.version.cuda is {rt.get('cuda')}, expected {cuda} for {variant}")
    if not rt.get("available"):
        problems.append(
            f"CUDA is not available to torch ({rt.get('init_error') or 'no reason given'}): check the "
            "driver parity and the GPU passthrough (run deploy.py)"
        )
    elif rt.get("device_count") != expected_count:
        problems.append(
            f"torch sees {rt.get('device_count')} GPUs, expected {expected_count}: check the "
            "passthrough of every /dev/nvidiaN to the container"
        )
    return problems
