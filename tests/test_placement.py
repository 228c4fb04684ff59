"""Where evaluations run: each records its node and the GPUs Ray gave it, and sees only those.

No GPU is needed: Ray schedules declared GPUs (``ray.init(num_gpus=...)``) like real ones and sets
``CUDA_VISIBLE_DEVICES`` for each task, which is what TensorFlow reads. Each check runs in a
subprocess of its own, since a process holds one Ray instance and the other tests' has no GPUs.
"""
import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("ray")

SCRIPT = textwrap.dedent('''
    import json, os, sys, time
    from pathlib import Path
    import ray

    gpus, per_eval, n, barrier = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    ray.init(num_cpus=n, num_gpus=gpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    from autodeuq.evaluator.ray import RayEvaluator
    from autodeuq.result import TrainResult

    def objective(eval_id, config):
        """Wait until all n evaluations run at once (a barrier of files), then say what it sees."""
        (barrier / str(eval_id)).touch()
        deadline = time.time() + 120
        while len(list(barrier.iterdir())) < n and time.time() < deadline:
            time.sleep(0.05)
        together = len(list(barrier.iterdir())) == n
        return TrainResult("failed", reason="planted", extra={"seen": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                                              "together": together})

    with RayEvaluator(objective, gpus_per_eval=per_eval) as evaluator:
        slots = evaluator.n_slots
        for i in range(1, n + 1):
            evaluator.submit(i, {})
        results = []
        while evaluator.n_running:
            results += evaluator.wait()
    print(json.dumps({"slots": slots, "results": [r.extra for _, r in sorted(results, key=lambda x: x[0])]}))
''')


def run_placement(tmp_path, gpus, per_eval, n=4):
    script, barrier = tmp_path / "placement.py", tmp_path / "barrier"
    script.write_text(SCRIPT)
    barrier.mkdir()
    proc = subprocess.run([sys.executable, str(script), str(gpus), str(per_eval), str(n), str(barrier)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_four_evaluations_with_one_gpu_each_see_four_distinct_devices(tmp_path):
    out = run_placement(tmp_path, gpus=4, per_eval=1)
    assert out["slots"] == 4
    results = out["results"]
    assert all(r["together"] for r in results)  # the four ran at once
    ids = [r["placement"]["gpu_ids"] for r in results]
    assert all(len(i) == 1 for i in ids) and len({i[0] for i in ids}) == 4
    for r in results:  # each process sees its own device, and never another's
        assert r["seen"] == r["placement"]["cuda_visible_devices"] == r["placement"]["gpu_ids"][0]
    assert len({r["placement"]["node"] for r in results}) == 1


def test_a_quarter_gpu_each_puts_four_evaluations_on_one_device(tmp_path):
    out = run_placement(tmp_path, gpus=1, per_eval=0.25)
    assert out["slots"] == 4
    results = out["results"]
    assert all(r["together"] for r in results)
    assert all(r["placement"]["gpu_ids"] == ["0"] and r["seen"] == "0" for r in results)
