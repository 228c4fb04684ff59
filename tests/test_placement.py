"""Where evaluations run: each records its node and the GPUs Ray gave it, and sees only those.

No GPU is needed: Ray schedules declared GPUs (``ray.init(num_gpus=...)``) like real ones and sets
``CUDA_VISIBLE_DEVICES`` for each task, which is what TensorFlow reads. Each check runs in a
subprocess of its own, since a process holds one Ray instance and the other tests' has no GPUs.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

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


def run_script(tmp_path, name, text, *args, env=None, timeout=300):
    """Run ``text`` as the script ``name`` in a process of its own (its own Ray instance or cluster),
    ``env`` added to this one's environment; what its last line prints, as JSON."""
    script = tmp_path / name
    script.write_text(text)
    proc = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path, env=None if env is None else {**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_placement(tmp_path, gpus, per_eval, n=4, env=None):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    return run_script(tmp_path, "placement.py", SCRIPT, gpus, per_eval, n, barrier, env=env)


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_quarter_gpu_each_puts_four_evaluations_on_one_device(tmp_path):
    out = run_placement(tmp_path, gpus=1, per_eval=0.25)
    assert out["slots"] == 4
    results = out["results"]
    assert all(r["together"] for r in results)
    assert all(r["placement"]["gpu_ids"] == ["0"] and r["seen"] == "0" for r in results)


@pytest.mark.slow
def test_an_evaluation_given_no_gpu_sees_none_of_the_nodes_gpus(tmp_path):
    # Ray leaves CUDA_VISIBLE_DEVICES as the worker inherited it for a task given no GPU: on a node
    # whose GPU 0 is visible, the evaluation's TensorFlow would see it and take its memory.
    out = run_placement(tmp_path, gpus=1, per_eval=0, n=2, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert out["slots"] == 2
    results = out["results"]
    assert all(r["together"] for r in results)
    assert all(r["placement"]["gpu_ids"] == [] and r["seen"] == "" for r in results)
    assert all(r["placement"]["cuda_visible_devices"] == "" for r in results)


FREE_GPUS = textwrap.dedent('''
    def free_gpus(expected):
        """The GPUs free, once they are ``expected`` or after 30 s (Ray frees an ended actor's soon after)."""
        deadline = time.time() + 30
        while ray.available_resources().get("GPU", 0) != expected and time.time() < deadline:
            time.sleep(0.1)
        return ray.available_resources().get("GPU", 0)
''')

REUSE = textwrap.dedent('''
    import json, os, sys, time
    import ray

    gpus = int(sys.argv[1])
    ray.init(num_cpus=4, num_gpus=gpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    from autodeuq.evaluator.ray import RayEvaluator
    from autodeuq.result import TrainResult

    def objective(eval_id, config):
        time.sleep(0.2 * (eval_id % 3))
        return TrainResult("failed", reason="planted", extra={"pid": os.getpid(),
                                                              "seen": os.environ.get("CUDA_VISIBLE_DEVICES")})

    # FREE_GPUS
    seen = {}
    with RayEvaluator(objective, gpus_per_eval=1) as evaluator:
        for batch in range(3):  # Ray hands idle task processes other GPUs after a pause
            for i in range(4):
                evaluator.submit(4 * batch + i + 1, {})
            while evaluator.n_running:
                for _, result in evaluator.wait():
                    seen.setdefault(result.extra["pid"], []).append(result.extra["seen"])
            time.sleep(2)
        started = None if evaluator.workers is None else evaluator.workers.started
        runs_on = evaluator.describe()["runs_on"]  # as the run's record says
    print(json.dumps({"started": started, "runs_on": runs_on, "seen": list(seen.values()),
                      "free_gpus": free_gpus(gpus)}))
''').replace("# FREE_GPUS\n", FREE_GPUS)


@pytest.mark.slow
def test_on_a_node_with_several_gpus_no_worker_process_computes_on_two_of_them(tmp_path):
    # TensorFlow reads CUDA_VISIBLE_DEVICES once per process: a task process that Ray gave GPU 1,
    # then GPU 3, would still compute on GPU 1. So evaluations run there on workers that keep their GPU.
    several, one = (run_script(tmp_path, "reuse.py", REUSE, gpus) for gpus in (4, 1))
    assert several["started"] == 4 and sum(map(len, several["seen"])) == 12
    assert several["runs_on"] == "workers that keep their GPUs" and one["runs_on"] == "tasks"
    assert len(several["seen"]) == 4  # four processes, each kept for three evaluations
    assert all(len(set(ids)) == 1 for ids in several["seen"])  # each always on its one GPU
    assert sorted(ids[0] for ids in several["seen"]) == ["0", "1", "2", "3"]
    assert several["free_gpus"] == 4  # closing the evaluator ended its workers
    assert one["started"] is None  # one GPU per node: tasks, their processes reused, always with GPU 0
    assert sum(map(len, one["seen"])) == 12 and len(one["seen"]) < 12
    assert {i for ids in one["seen"] for i in ids} == {"0"}


FAULTS = textwrap.dedent('''
    import json, os, time
    import ray

    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    from autodeuq.evaluator.ray import RayEvaluator
    from autodeuq.result import TrainResult

    def objective(eval_id, config):
        if eval_id == 1:
            time.sleep(60)  # beyond the limit
        if eval_id == 2:
            os._exit(1)  # the process dies
        return TrainResult("failed", reason="planted", extra={"pid": os.getpid()})

    # FREE_GPUS
    results = {}
    with RayEvaluator(objective, gpus_per_eval=1, eval_timeout=5) as evaluator:
        evaluator.submit(1, {})
        evaluator.submit(2, {})
        next_id = 3
        while evaluator.n_running:
            for eval_id, result in evaluator.wait():
                results[eval_id] = [result.status, result.reason, (result.extra or {}).get("pid")]
                if next_id <= 6:
                    evaluator.submit(next_id, {})
                    next_id += 1
        started = evaluator.workers.started
        free_between = free_gpus(1)  # one idle worker holds its GPU
        for i in range(10, 15):  # more at once than there are GPUs (as the refit submits its members)
            evaluator.submit(i, {})
        while evaluator.n_running:
            for eval_id, result in evaluator.wait():
                results[eval_id] = [result.status, result.reason, (result.extra or {}).get("pid")]
        started_after_burst = evaluator.workers.started
        evaluator.submit(7, {})  # left running: closing ends it and its worker
        time.sleep(1)
    print(json.dumps({"results": results, "started": started, "free_between": free_between,
                      "started_after_burst": started_after_burst, "free_gpus": free_gpus(2)}))
''').replace("# FREE_GPUS\n", FREE_GPUS)


@pytest.mark.slow
def test_a_worker_that_keeps_its_gpu_is_replaced_when_its_evaluation_times_out_or_crashes(tmp_path):
    out = run_script(tmp_path, "faults.py", FAULTS)
    results = out["results"]
    assert results["1"][0] == "failed" and results["1"][1].startswith("timeout")
    assert results["2"][0] == "failed" and results["2"][1].startswith("worker process died")
    assert all(results[str(i)][1] == "planted" for i in range(3, 7))  # the next evaluations ran
    assert out["started"] == 3  # the crashed worker was replaced for the evaluations that followed
    assert out["free_between"] == 1  # the timed-out one was ended: only the idle worker holds a GPU
    # five submitted at once on two GPUs: all ran, on no more than two workers at a time
    assert all(results[str(i)][1] == "planted" for i in range(10, 15))
    assert out["started_after_burst"] == 4 and len({results[str(i)][2] for i in range(10, 15)}) == 2
    assert out["free_gpus"] == 2  # none holds one after the evaluator closed


CLUSTER = textwrap.dedent('''
    import json, subprocess, sys
    from ray.cluster_utils import Cluster

    # A head that runs no task and two worker nodes of one CPU (and argv[1] GPUs) each, on this machine;
    # the autodeuq command of the remaining arguments joins it.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1, num_gpus=int(sys.argv[1]))
    cluster.wait_for_nodes()
    try:
        proc = subprocess.run([sys.executable, "-m", "autodeuq", *sys.argv[2:], "--ray-address", cluster.address,
                               "--no-progress"], capture_output=True, text=True, timeout=400)
        print(json.dumps({"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr[-3000:]}))
    finally:
        cluster.shutdown()
''')


@pytest.mark.slow
def test_a_search_through_an_address_runs_on_several_nodes_and_the_driver_keeps_everything(tmp_path):
    import pandas as pd

    from autodeuq.catalog import Catalog

    run = tmp_path / "run"
    out = run_script(tmp_path, "cluster.py", CLUSTER, 0, "search", "--dataset", "toy-sine", "--search", "random",
                     "--max-evals", "6", "--epochs", "3", "--run-dir", run, timeout=600)
    assert out["rc"] == 0, out["err"]
    assert "2 parallel evaluation(s)" in out["out"] and "6 done" in out["out"]
    frame = pd.read_csv(run / "results.csv")
    assert (frame["status"] == "done").all() and frame["node"].notna().all()
    assert frame["node"].nunique() == 2  # both worker nodes trained, the head none
    with Catalog(run) as catalog:  # every network and its predictions came back to the driver's catalog
        for entry_id in catalog.ids("done"):
            catalog.load_model(entry_id)
        assert catalog.validation_predictions(catalog.ids("done")).ids == catalog.ids("done")
    # what the run directory holds is the catalog's, written by the driver alone
    assert sorted(p.name for p in run.iterdir() if not p.name.startswith("catalog.sqlite-")) == sorted(  # -wal, -shm
        ["catalog.lock", "catalog.sqlite", "meta.json", "models", "predictions", "results.csv", "valid_targets.npy"])
    assert sorted(p.name for p in (run / "models").iterdir()) == sorted(f"{i}.keras" for i in frame["id"])


@pytest.mark.slow
def test_a_whole_run_on_two_nodes_of_two_gpus_keeps_each_worker_on_one_gpu(tmp_path):
    import pandas as pd

    run = tmp_path / "run"
    out = run_script(tmp_path, "cluster.py", CLUSTER, 2, "run", "--dataset", "toy-sine", "--space", "toy",
                     "--max-evals", "8", "--epochs", "5", "--gpus-per-eval", "1", "--run-dir", run, timeout=600)
    assert out["rc"] == 0, out["err"]
    assert "retrained on 400 rows" in out["out"]  # the refit ran on the workers too, and ended
    frame = pd.read_csv(run / "results.csv")
    assert (frame["status"] == "done").all() and frame["node"].nunique() == 2
    per_worker = frame.groupby(["node", "worker"])["gpus"].nunique()
    assert len(per_worker) == 2 and (per_worker == 1).all()  # one worker per node, always on its one GPU


def test_workers_keep_their_gpus_only_where_a_node_has_more_gpus_than_an_evaluation_takes(monkeypatch):
    import ray

    from autodeuq.evaluator.ray import pinned_workers

    def nodes(*gpus, dead=()):
        return lambda: [{"Alive": i not in dead, "Resources": {"CPU": 8.0, **({"GPU": g} if g else {})}}
                        for i, g in enumerate(gpus)]

    cases = [((8,), 1, True), ((8,), 0.25, True), ((1,), 0.25, False), ((1, 1, 1), 1, False), ((2,), 2, False),
             ((4,), 2, True), ((0, 4), 0, False), ((1, 4), 1, True)]
    for gpus, share, expected in cases:
        monkeypatch.setattr(ray, "nodes", nodes(*gpus))
        assert pinned_workers(share) is expected, (gpus, share)
    monkeypatch.setattr(ray, "nodes", nodes(1, 4, dead=(1,)))  # a dead node's GPUs do not count
    assert pinned_workers(1) is False
