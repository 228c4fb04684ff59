"""benchmarks/gpu_placement.py: what it accepts as evaluations placed right on real GPUs, and what not."""
import copy

from benchmarks.gpu_placement import check


def record(gpu="0", processes=4, seen=None, devices=1, product_on="cuda:0", error=2e-6, together=True):
    return {"reason": "probe", "together": together, "seen": gpu if seen is None else seen,
            "placement": {"node": "n", "gpu_ids": [gpu], "cuda_visible_devices": gpu},
            "framework": "torch", "devices": ["H100"] * devices, "product_on": product_on,
            "product_rel_error": error, "processes_on_device": processes, "own_memory_mib": 666.0}


def run(share, results, gpus=1):
    return {"gpus_per_eval": share, "cluster": {"CPU": 16, "GPU": gpus}, "results": results}


def test_a_quarter_gpu_each_on_one_device_holds():
    assert check(run(0.25, [record() for _ in range(4)])) == []


def test_one_gpu_each_on_four_devices_holds():
    assert check(run(1, [record(gpu=str(i), processes=1) for i in range(4)], gpus=4)) == []


def cpu_record(seen="", devices=0, product_on="/job:localhost/replica:0/task:0/device:CPU:0", own_gpus=()):
    return {"reason": "probe", "together": True, "seen": seen,
            "placement": {"node": "n", "gpu_ids": [], "cuda_visible_devices": seen},
            "framework": "tensorflow", "devices": ["H100"] * devices, "product_on": product_on,
            "product_rel_error": 1e-7, "own_gpus": list(own_gpus)}


def test_no_gpu_each_holds_when_no_evaluation_touches_one():
    out = {"gpus_per_eval": 0.0, "cluster": {"CPU": 16, "GPU": 1}, "evaluations": 16,
           "results": [cpu_record() for _ in range(16)]}
    assert check(out) == []
    # what Ray 2.60 leaves an evaluation given no GPU on a GPU node: CUDA_VISIBLE_DEVICES unset
    out["results"][3] = cpu_record(seen=None, devices=1, product_on="cuda:0", own_gpus=[0])
    out["results"][3]["placement"]["cuda_visible_devices"] = None
    problems = check(out)
    assert len(problems) == 4
    assert "placement and CUDA_VISIBLE_DEVICES disagree" in problems[0]
    assert "the framework lists 1 GPUs, Ray gave 0" in problems[1]
    assert problems[2:] == ["the product ran on cuda:0 with 0 GPUs given",
                            "the evaluation holds memory on GPU(s) [0] with none given"]


def test_each_broken_promise_is_named():
    good = run(0.25, [record() for _ in range(4)])
    cases = {
        "did not run with the others": dict(together=False),
        "CUDA_VISIBLE_DEVICES disagree": dict(seen="1"),
        "the framework lists 2 GPUs": dict(devices=2),
        "the product ran on /job:localhost/device:CPU:0 with 1 GPUs": dict(product_on="/job:localhost/device:CPU:0"),
        "the product is off": dict(error=0.5),
        "3 processes on the device, 4 expected": dict(processes=3),
    }
    for words, change in cases.items():
        broken = copy.deepcopy(good)
        broken["results"][2] = record(**change)
        problems = check(broken)
        assert len(problems) == 1 and words in problems[0], (words, problems)
    assert "evaluations for 1 GPUs" in check(run(0.25, [record() for _ in range(3)]))[0]
    shared = check(run(1, [record(gpu="0", processes=1), record(gpu="0", processes=1)], gpus=2))
    assert shared == ["devices not shared evenly: [('0',), ('0',)]"]
    failed = run(1, [{"reason": "ModuleNotFoundError: No module named 'jax'",
                      "placement": {"node": "n", "gpu_ids": ["0"], "cuda_visible_devices": "0"}}])
    assert check(failed) == ["evaluation failed: ModuleNotFoundError: No module named 'jax'"]
