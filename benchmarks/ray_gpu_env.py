"""What Ray itself sets ``CUDA_VISIBLE_DEVICES`` to in tasks given no GPU and one GPU (no autodeuq code).

One case per run, each a fresh local Ray instance of 2 CPUs:

- ``auto``: Ray detects the machine's GPUs;
- ``declared``: one GPU declared (``ray.init(num_gpus=1)``), as the tests do without GPUs;
- ``env0``: the driver's environment has ``CUDA_VISIBLE_DEVICES=0`` (as a cluster's job
  scheduler sets it for the GPUs it allocated), Ray detecting from it.

``auto`` and ``env0`` need a machine with an NVIDIA GPU (elsewhere Ray finds none, and the task
given one waits for ever).

Printed, as one JSON line: the variable in the driver before and after ``ray.init``, in two tasks
given no GPU, in one given a GPU, in three more given none, and in Ray's own processes.

    python benchmarks/ray_gpu_env.py {auto,declared,env0}
"""
import json
import os
import sys
from pathlib import Path

import ray


def main(case: str) -> dict:
    if case == "env0":
        os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    options = dict(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    if case == "declared":
        options["num_gpus"] = 1
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    ray.init(**options)
    after = os.environ.get("CUDA_VISIBLE_DEVICES")

    @ray.remote(num_gpus=0)
    def no_gpu():
        return os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()

    @ray.remote(num_gpus=1)
    def one_gpu():
        return os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()

    zero = ray.get([no_gpu.remote() for _ in range(2)])
    one = ray.get(one_gpu.remote())
    zero_after = ray.get([no_gpu.remote() for _ in range(3)])
    envs: dict[str, set] = {}
    for proc in Path("/proc").glob("[0-9]*"):  # Ray's processes (Linux)
        try:
            command = proc.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            environ = dict(item.split("=", 1) for item in proc.joinpath("environ").read_bytes().decode(
                errors="replace").split("\0") if "=" in item)
        except OSError:
            continue
        if "raylet/raylet" in command or command.startswith("ray::") or "default_worker" in command:
            envs.setdefault(command.split()[0][-20:], set()).add(environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
    gpus = ray.cluster_resources().get("GPU")
    ray.shutdown()
    return {"case": case, "cluster_gpus": gpus,
            "driver_before": before, "driver_after_init": after, "zero_gpu_tasks": zero, "gpu_task": one,
            "zero_after": zero_after, "process_envs": {k: sorted(v) for k, v in envs.items()}}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
