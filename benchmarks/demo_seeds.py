"""The quick-start demo on several seeds: its defaults beside the cross-fitted ensemble stage.

For each seed, the demo's command (``autodeuq run`` on toy-sine, the toy space, 100 evaluations,
the defaults: regression is not cross-fitted by default) runs as a user runs it, timed; then
``autodeuq ensemble --crossfit`` builds the cross-fitted ensemble on the same catalog (timed). Each
ensemble is measured as ``benchmarks/toy_uncertainty.py`` measures it (epistemic std in the gap
between the training regions against on them, effective size over networks and over
configurations, NLL on the noiseless grid) with the test scores of its ``metrics.json``.
``--report`` writes the page from the records; a seed already recorded is skipped, so the same
command resumes.

    python benchmarks/demo_seeds.py --seeds 0-9 --runs-dir runs/demo_seeds \\
        --results benchmarks/results/demo_seeds
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from toy_uncertainty import measures  # noqa: E402

DEMO = ["--dataset", "toy-sine", "--space", "toy", "--max-evals", "100"]
#: The issue's targets per run: effective size (over configurations) and gap epistemic / train.
TARGET_EFFECTIVE, TARGET_GAP = 3.0, 3.0
TEST_KEYS = ("nll", "nll_gaussian", "rmse", "coverage_90", "coverage_conformal_90")


def _cli(*args: str) -> float:
    tic = time.monotonic()
    subprocess.run([sys.executable, "-m", "autodeuq", *args], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - tic


def _scores(manifest: Path) -> dict:
    test = json.loads((manifest.parent / "metrics.json").read_text())["test"]
    return {**measures(manifest), **{k: test[k]["mean"] for k in TEST_KEYS if k in test}}


def run_seed(seed: int, runs: Path, workers: int) -> dict:
    run_dir = runs / f"seed{seed}"
    run_s = _cli("run", *DEMO, "--seed", str(seed), "--run-dir", str(run_dir), "--workers", str(workers),
                 "--no-progress")
    crossfit = run_dir / "crossfit" / "ensemble.json"
    stage_s = _cli("ensemble", "--run-dir", str(run_dir), "--crossfit", "--out", str(crossfit))
    return {"seed": seed, "defaults": {**_scores(run_dir / "ensemble.json"), "run_s": round(run_s, 1)},
            "crossfit": {**_scores(crossfit), "stage_s": round(stage_s, 1)}}


def _meets(m: dict) -> tuple[bool, bool]:
    return m["effective_configurations"] >= TARGET_EFFECTIVE, m["gap_ratio"] >= TARGET_GAP


def report(records: list[dict]) -> str:
    commands = sorted({r["command"] for r in records})
    lines = ["# The quick-start demo on several seeds", "",
             "Commands: " + "; ".join(f"`{c}`" for c in commands) + ".", "",
             "Machine: " + ", ".join(sorted({r["machine"] for r in records})) + "; load average at the end of "
             "each seed " + ", ".join(f"{r['load_after'][0]:.1f}" for r in records) + " (the seconds carry "
             "that load; the decisions do not depend on it).", "",
             "Per seed: effective size over configurations (1 / sum of the squared weights, a "
             "configuration's fold networks counted once; over networks in brackets), the epistemic std in "
             "the gap [-15, 15] over its mean on the training regions, the NLL on the noiseless grid "
             "[-40, 40] and the test scores of `metrics.json` (its 200 test rows).", "",
             "| seed | stage | effective size | gap / train | grid NLL | test NLL | 90 % coverage (mixture) "
             "| 90 % coverage (conformal) | seconds |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: r["seed"]):
        for stage in ("defaults", "crossfit"):
            m = r[stage]
            seconds, nan = m.get("run_s", m.get("stage_s")), float("nan")
            lines.append(f"| {r['seed']} | {stage} | {m['effective_configurations']:.2f} ({m['effective_size']:.2f}) "
                         f"| {m['gap_ratio']:.1f}x | {m['test_nll']:.2f} | {m.get('nll', nan):.2f} "
                         f"| {m.get('coverage_90', nan):.3f} | {m.get('coverage_conformal_90', nan):.3f} "
                         f"| {seconds} |")
    lines += ["", f"**Runs meeting the targets** (effective size >= {TARGET_EFFECTIVE:g}, gap >= {TARGET_GAP:g}x), "
              f"of {len(records)}:", "", "| stage | effective size | gap | both | median gap / train |",
              "|---|---|---|---|---|"]
    for stage in ("defaults", "crossfit"):
        met = np.array([_meets(r[stage]) for r in records])
        gaps = [r[stage]["gap_ratio"] for r in records]
        lines.append(f"| {stage} | {met[:, 0].sum()} | {met[:, 1].sum()} | {met.all(axis=1).sum()} "
                     f"| {np.median(gaps):.1f}x |")
    return "\n".join(lines) + "\n"


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=_seeds, default=_seeds("0-9"), help="e.g. 0-9")
    p.add_argument("--runs-dir", type=Path, default=Path("runs/demo_seeds"))
    p.add_argument("--results", type=Path, default=Path("benchmarks/results/demo_seeds"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--machine", default=f"{platform.machine()} {platform.processor()}".strip())
    p.add_argument("--report", action="store_true", help="write demo_seeds.md from the records, nothing else")
    args = p.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    raw = args.results / "demo_seeds_raw.json"
    records = json.loads(raw.read_text()) if raw.exists() else []
    command = "python benchmarks/demo_seeds.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    for seed in [] if args.report else args.seeds:
        if any(r["seed"] == seed for r in records):
            continue
        record = run_seed(seed, args.runs_dir, args.workers)
        record.update({"command": command, "machine": args.machine,
                       "load_after": [round(v, 2) for v in os.getloadavg()]})
        records.append(record)
        raw.write_text(json.dumps(records, indent=1) + "\n")
        print(json.dumps({k: record[k] for k in ("seed",)}),
              {s: {k: round(record[s][k], 2) for k in ("effective_configurations", "gap_ratio", "test_nll")}
               for s in ("defaults", "crossfit")}, flush=True)
    if records:
        (args.results / "demo_seeds.md").write_text(report(records))


if __name__ == "__main__":
    main()
