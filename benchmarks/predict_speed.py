"""What a prediction costs, through TensorFlow (a saved manifest) and through ONNX Runtime (its .onnx export).

For one ensemble, given as its manifest and its ONNX export (``autodeuq export --format onnx``),
the script measures each of these, every process a fresh one:

* ``autodeuq predict`` of 19 rows, the whole process: wall seconds and peak resident memory;
* ``import tensorflow`` alone (seconds; once, not a prediction path);
* ``load_ensemble(...)`` then the first ``predict`` of 19 rows (seconds each);
* one row from the loaded ensemble: the median of ``--one-row`` calls (milliseconds);
* 100,000 rows from the loaded ensemble (seconds, after the first predict);
* ``autodeuq predict`` of 1,000,000 rows, the whole process: wall seconds and peak resident memory
  (the table is written first, not timed).

Rows are drawn (with replacement, seed 0) from ``--data``, a table the ensemble reads, or, without
it, made for a numeric ensemble from its recorded input standardization (mean plus standard
deviations times a normal draw). Each whole-process figure is the median of ``--repeats`` runs.
The results (a Markdown table, the command, the CPU model and the load from ``uptime``) are
printed, and written to ``--out`` when given.

    python benchmarks/predict_speed.py --manifest runs/demo/ensemble.json --onnx demo.onnx \\
        --out benchmarks/results/predict_speed/demo.md
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

INNER = """
import json, sys, time
import numpy as np, pandas as pd
started = time.perf_counter()
from autodeuq import load_ensemble
ens = load_ensemble(sys.argv[1])
loaded = time.perf_counter()
table = pd.read_csv(sys.argv[2])
small, one = table.iloc[:19], table.iloc[:1]
ens.predict(small)
first = time.perf_counter()
times = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter()
    ens.predict(one)
    times.append(time.perf_counter() - t)
big = pd.read_csv(sys.argv[4])
t = time.perf_counter()
ens.predict(big)
rows_100k = time.perf_counter() - t
print(json.dumps({"load_s": loaded - started, "first_predict_s": first - loaded,
                  "one_row_ms": 1e3 * float(np.median(times)), "rows_100k_s": rows_100k,
                  "tensorflow_imported": "tensorflow" in sys.modules}))
"""


def run_process(argv) -> tuple[float, float]:
    """(wall seconds, peak resident MB) of a child process, which must succeed."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(map(str, argv))} failed:\n{stderr[-2000:]}")
    return wall, usage.ru_maxrss / 1024.0  # Linux reports kilobytes


def make_tables(manifest: str, data: Path | None, rows: list[int], folder: Path) -> dict[int, Path]:
    """CSV tables of ``rows`` rows each, drawn from ``data`` or from the ensemble's standardization."""
    import pandas as pd

    rng = np.random.default_rng(0)
    if data is not None:
        source = pd.read_csv(data)
    else:
        from autodeuq import load_ensemble

        ens = load_ensemble(manifest)
        scaling = ens.source.standardization
        draws = rng.normal(size=(1000, len(ens.columns)))
        source = pd.DataFrame(np.asarray(scaling["x_mean"]) + draws * np.asarray(scaling["x_std"]), columns=ens.columns)
    out = {}
    for n in rows:
        out[n] = folder / f"rows_{n}.csv"
        source.iloc[rng.integers(0, len(source), size=n)].to_csv(out[n], index=False)
    return out


def measure(model: str, tables: dict[int, Path], repeats: int, one_row: int, folder: Path) -> dict:
    python = sys.executable
    env_path = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    os.environ["PYTHONPATH"] = env_path
    cli = [python, "-m", "autodeuq", "predict", "--ensemble", model, "--out", str(folder / "p.csv"), "--data"]
    small = [run_process(cli + [str(tables[19])]) for _ in range(repeats)]
    big = [run_process(cli + [str(tables[1_000_000])]) for _ in range(repeats)]
    inner = subprocess.run([python, "-c", INNER, model, str(tables[19]), str(one_row), str(tables[100_000])],
                           capture_output=True, text=True)
    if inner.returncode != 0:
        raise SystemExit(f"the in-process measurement failed:\n{inner.stderr[-2000:]}")
    result = json.loads(inner.stdout.splitlines()[-1])
    result.update(predict_19_s=statistics.median(w for w, _ in small), predict_19_mb=max(m for _, m in small),
                  predict_1m_s=statistics.median(w for w, _ in big), predict_1m_mb=max(m for _, m in big))
    return result


def machine() -> tuple[str, str]:
    model = next((line.split(":", 1)[1].strip() for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name")),
        platform.processor())
    return f"{model}, {os.cpu_count()} logical CPUs", subprocess.run(["uptime"], capture_output=True,
                                                                    text=True).stdout.strip()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--manifest", required=True, help="the ensemble's manifest (the TensorFlow path)")
    p.add_argument("--onnx", required=True, help="its ONNX export (the ONNX Runtime path)")
    p.add_argument("--data", type=Path, help="a table the ensemble reads, rows are drawn from (default: made)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each whole-process figure (median)")
    p.add_argument("--one-row", type=int, default=50, help="calls of the one-row figure (median)")
    p.add_argument("--out", type=Path, help="also write the results here (Markdown)")
    args = p.parse_args(argv)

    cpu, load_before = machine()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tables = make_tables(args.manifest, args.data, [19, 100_000, 1_000_000], folder)
        import_tf = statistics.median(run_process([sys.executable, "-c", "import tensorflow"])[0]
                                      for _ in range(args.repeats))
        results = {"TensorFlow (manifest)": measure(args.manifest, tables, args.repeats, args.one_row, folder),
                   "ONNX Runtime (.onnx)": measure(args.onnx, tables, args.repeats, args.one_row, folder)}
    _, load_after = machine()
    rows = [("`autodeuq predict` of 19 rows, whole process", lambda r: f"{r['predict_19_s']:.2f} s; "
                                                                        f"{r['predict_19_mb']:.0f} MB resident"),
            ("`import tensorflow` alone", lambda r: None),
            ("`load_ensemble(...)` then the first `predict`",
             lambda r: f"{r['load_s']:.2f} s + {r['first_predict_s']:.2f} s"),
            (f"one row from a loaded ensemble (median of {args.one_row})", lambda r: f"{r['one_row_ms']:.2f} ms"),
            ("100,000 rows from a loaded ensemble", lambda r: f"{r['rows_100k_s']:.2f} s"),
            ("1,000,000 rows through `autodeuq predict`", lambda r: f"{r['predict_1m_s']:.1f} s; "
                                                                    f"{r['predict_1m_mb']:.0f} MB resident"),
            ("TensorFlow imported by the loaded ensemble's predict", lambda r: str(r["tensorflow_imported"]))]
    names = list(results)
    lines = ["| what | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, cell in rows:
        values = [cell(results[n]) for n in names]
        if values[0] is None:
            values = [f"{import_tf:.2f} s", "not imported"]
        lines.append(f"| {label} | " + " | ".join(values) + " |")
    command = "python benchmarks/predict_speed.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        *lines, "",
        f"Command: `{command}`", "",
        f"Machine: {cpu}; Python {platform.python_version()}.", "",
        f"Load (`uptime`) before: `{load_before}`; after: `{load_after}`.", "",
        f"Whole-process figures: the median of {args.repeats} runs (peak resident memory: the largest).", "",
        "Raw: `" + json.dumps(results) + "`", ""])
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
