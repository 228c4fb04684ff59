"""Where evaluations run on a machine with real GPUs, and what each one then sees and uses there.

The local Ray instance detects the machine's GPUs itself (none are declared). For each share
(``--gpus-per-eval`` 0, 1, then 0.25) the script runs as many evaluations as the machine holds at
that share through :class:`~autodeuq.engine.evaluator.ray.RayEvaluator`, the evaluator of every search. The
evaluations wait for each other twice (barriers of files), so that they hold their devices at
the same time; each reports:

- its placement record (node, Ray's GPU ids, ``CUDA_VISIBLE_DEVICES``), as a search stores it;
- the GPUs its deep-learning framework lists, and the device where a matrix product it computed
  ran, and that product's error against float64;
- the GPU memory its process holds and how many processes compute on its device at that moment
  (NVML, which counts every process of the physical device, whatever the framework sees); with
  no GPU given, the GPUs on which its process holds memory (none expected).

The framework is TensorFlow where it is built for GPUs (with memory growth, which importing
autodeuq asks for, as in a search), else PyTorch, else TensorFlow for CPUs, else JAX (without
preallocation): the output names the one used. Its default placement decides where the product
runs: a GPU where it sees one.

    python benchmarks/gpu_placement.py [--shares 0,1,0.25] [--out placement.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from autodeuq.core.result import TrainResult
from autodeuq.engine.evaluator.ray import RayEvaluator

SIZE = 2048  # of the square matrices multiplied on the device


def framework_probe(a: np.ndarray, b: np.ndarray) -> dict:
    """The GPUs a framework lists in this process, and where its default placement computes a
    product of ``a`` and ``b`` (a GPU when it sees one, else the CPU).

    The framework: TensorFlow where it is built for GPUs, else PyTorch, else TensorFlow (for CPUs),
    else JAX.
    """
    try:
        import tensorflow as tf
    except ImportError:
        tf = None
    if tf is not None and tf.test.is_built_with_cuda():
        return _tensorflow_probe(tf, a, b)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        c = torch.from_numpy(a).to(device) @ torch.from_numpy(b).to(device)
        return {"framework": f"torch {torch.__version__}",
                "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
                "product_on": str(c.device), "product": c.cpu().numpy()}
    if tf is not None:
        return _tensorflow_probe(tf, a, b)
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # JAX would otherwise take 75 % of the device
    import jax

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    c = jax.device_put(a) @ jax.device_put(b)
    return {"framework": f"jax {jax.__version__}", "devices": [str(d) for d in gpus],
            "product_on": str(next(iter(c.devices()))), "product": np.asarray(c)}


def _tensorflow_probe(tf, a, b) -> dict:
    c = tf.matmul(a, b)
    return {"framework": f"tensorflow {tf.__version__}",
            "devices": [d.name for d in tf.config.list_physical_devices("GPU")],
            "product_on": c.device, "product": c.numpy()}


def nvml_view(gpu_ids: list[str]) -> dict:
    """NVML's view of the physical GPUs, which counts every process whatever the framework sees.

    With GPUs given: this process's memory on the first and how many processes compute on it.
    Without: the GPUs on which this process holds memory (none, if it was kept off them).
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:  # no NVIDIA driver here (or no NVML binding): nothing to look at
        return {"nvml": f"unavailable: {error}"}
    pid = os.getpid()
    if not gpu_ids:
        held = [i for i in range(pynvml.nvmlDeviceGetCount())
                if any(p.pid == pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(
                    pynvml.nvmlDeviceGetHandleByIndex(i)))]
        return {"own_gpus": held}
    handle = pynvml.nvmlDeviceGetHandleByIndex(int(gpu_ids[0]))
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    mine = [p.usedGpuMemory for p in procs if p.pid == pid]
    return {"device_name": pynvml.nvmlDeviceGetName(handle), "processes_on_device": len(procs),
            "own_memory_mib": (mine[0] or 0) / 2**20 if mine else None}


def wait_for(folder: Path, n: int, timeout: float = 120.0) -> bool:
    deadline = time.time() + timeout
    while len(list(folder.iterdir())) < n and time.time() < deadline:
        time.sleep(0.05)
    return len(list(folder.iterdir())) >= n


def objective(eval_id, config):
    """One evaluation: start with the others, compute on the device, look at it while all hold it."""
    first, second, n = Path(config["first"]), Path(config["second"]), config["n"]
    (first / str(eval_id)).touch()
    together = wait_for(first, n)
    rng = np.random.default_rng(eval_id)
    a, b = rng.standard_normal((2, SIZE, SIZE), dtype=np.float32)
    seen = framework_probe(a, b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    seen["product_rel_error"] = float(np.abs(seen.pop("product") - exact).max() / np.abs(exact).max())
    (second / str(eval_id)).touch()
    together = wait_for(second, n) and together
    import ray

    gpu_ids = [str(g) for g in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
    nvml = nvml_view(gpu_ids)
    (first / f"done-{eval_id}").touch()  # hold the device until every evaluation has looked at it
    wait_for(first, 2 * n)
    extra = {"together": together, "seen": os.environ.get("CUDA_VISIBLE_DEVICES"), **seen, **nvml}
    return TrainResult("failed", reason="probe", extra=extra)


def run_share(share: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp, RayEvaluator(objective, gpus_per_eval=share) as evaluator:
        n = evaluator.n_slots
        first, second = Path(tmp, "first"), Path(tmp, "second")
        first.mkdir(), second.mkdir()
        for i in range(1, n + 1):
            evaluator.submit(i, {"first": str(first), "second": str(second), "n": n})
        results = []
        while evaluator.n_running:
            results += evaluator.wait()
        cluster = evaluator.cluster
    import ray

    ray.shutdown()  # a fresh instance for the next share: no worker process keeps a device context
    return {"gpus_per_eval": share, "cluster": cluster, "evaluations": n,
            "results": [{"reason": r.reason, **(r.extra or {})} for _, r in sorted(results, key=lambda x: x[0])]}


def check(out: dict) -> list[str]:
    """What does not hold of what a share promises (empty: everything holds).

    With GPUs: each evaluation sees exactly the GPUs Ray gave it and computes there, and a shared
    device holds as many processes as evaluations share it. Without (``gpus_per_eval`` 0): none
    sees a GPU, computes on one, or holds memory on one.
    """
    problems = []
    share, results = out["gpus_per_eval"], out["results"]
    per_device = round(1 / share) if 0 < share < 1 else 1
    expected = int(out["cluster"]["GPU"] * per_device) if share else out["evaluations"]
    if len(results) != expected or not results:
        problems.append(f"{len(results)} evaluations for {out['cluster']['GPU']:g} GPUs at {share:g} each")
    for r in results:
        ids = r["placement"]["gpu_ids"]
        if r["reason"] != "probe":
            problems.append(f"evaluation failed: {r['reason']}")
            continue
        if not r["together"]:
            problems.append(f"evaluation did not run with the others: {r}")
        visible = r["placement"]["cuda_visible_devices"]
        if len(ids) != (max(1, int(share)) if share else 0) or r["seen"] != visible or r["seen"] != ",".join(ids):
            problems.append(f"placement and CUDA_VISIBLE_DEVICES disagree: {r}")
        if len(r["devices"]) != len(ids):
            problems.append(f"the framework lists {len(r['devices'])} GPUs, Ray gave {len(ids)}: {r}")
        on_gpu = "gpu" in r["product_on"].lower() or "cuda" in r["product_on"].lower()
        if on_gpu != bool(ids):
            problems.append(f"the product ran on {r['product_on']} with {len(ids)} GPUs given")
        if r["product_rel_error"] > 1e-2:
            problems.append(f"the product is off by {r['product_rel_error']:.2g}")
        if ids and (r.get("processes_on_device") != per_device or not r.get("own_memory_mib")):
            problems.append(f"{r.get('processes_on_device')} processes on the device, {per_device} expected: {r}")
        if not ids and r.get("own_gpus"):
            problems.append(f"the evaluation holds memory on GPU(s) {r['own_gpus']} with none given")
    ids = [tuple(r["placement"]["gpu_ids"]) for r in results]
    if share and len(set(ids)) * per_device != len(ids):
        problems.append(f"devices not shared evenly: {ids}")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", default="0,1,0.25", help="GPUs per evaluation, comma-separated")
    parser.add_argument("--out", type=Path, help="write the records and checks here (JSON)")
    args = parser.parse_args(argv)
    try:
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip()
    except FileNotFoundError:
        smi = "no nvidia-smi"
    report = {"nvidia_smi": smi, "python": sys.version.split()[0], "runs": []}
    try:
        import tensorflow as tf

        report["tensorflow"] = f"{tf.__version__}, GPUs: {len(tf.config.list_physical_devices('GPU'))}"
    except ImportError as error:
        report["tensorflow"] = f"not importable: {error}"
    for share in (float(s) for s in args.shares.split(",")):
        out = run_share(share)
        out["problems"] = check(out)
        report["runs"].append(out)
        results = out["results"]
        print(f"{share:g} GPU per evaluation: {out['evaluations']} at once on {out['cluster']['GPU']:g} GPU(s), "
              f"{results[0].get('framework')}; device ids {[x['placement']['gpu_ids'] for x in results]}, "
              f"processes on the device {[x.get('processes_on_device') for x in results]}, "
              f"memory MiB {[round(x.get('own_memory_mib') or 0) for x in results]}: "
              + ("all checks hold" if not out["problems"] else "PROBLEMS " + "; ".join(out["problems"])))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return 1 if any(run["problems"] for run in report["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
