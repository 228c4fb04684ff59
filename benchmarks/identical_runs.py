"""Bit-identical check of a refactoring: the same fixed-seed serial runs at two commits give the
same catalogs and ensembles.

``run`` runs ``autodeuq run`` (serial evaluator, fixed seed, a handful of short evaluations, then
the ensemble) on toy-sine and on a small classification table written here from a fixed seed,
with the package of a given worktree (its root first on ``PYTHONPATH``), into ``OUT/<case>``.
``compare`` compares two such folders: per catalog entry the configuration, status, epochs and
objective (the SQLite index, less the times), the stored networks' Keras configuration and
weights (every array of ``model.weights.h5``, byte for byte: the zip's and the file's own
timestamps differ from run to run), the validation predictions (every array of the ``.npz``,
byte for byte), the saved ensemble (members, weights, selection record, calibration; less the
refitted files' checksums and the refit's seconds) and its refitted networks' weights.

Usage (from any directory)::

    python benchmarks/identical_runs.py run WORKTREE OUT
    python benchmarks/identical_runs.py compare OUT_A OUT_B

``compare`` prints one line per difference and exits 1 when there is any, 0 when the runs are
identical.
"""
from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

COMMON = ["--evaluator", "serial", "--seed", "0", "--max-evals", "6", "--epochs", "4", "--search", "agebo",
          "--size", "3", "--no-progress", "--new-run"]
TOY = ["--dataset", "toy-sine", "--space", "toy"]
CASES = {  # each early-discarding rule once, and auto (decided by the projected cost) on both tasks
    "toy-sine": [*TOY, "--early-discarding", "none"],
    "toy-sine-sha": [*TOY, "--early-discarding", "sha", "--sha-min-epochs", "1", "--sha-reduction", "2"],
    "toy-sine-iepoch": [*TOY, "--early-discarding", "iepoch", "--iepoch-epochs", "2", "--iepoch-top-k", "2"],
    "toy-sine-auto": [*TOY, "--early-discarding", "auto"],
    "classes": ["--data", "{out}/classes.csv", "--target", "label", "--task", "classification", "--space", "toy",
                "--early-discarding", "auto"],
}
# Entry columns that depend on the clock or the machine, not on what was computed.
CLOCK_COLUMNS = {"start_time", "end_time", "duration", "submitted", "finished", "wall_time", "submit_time",
                 "created", "updated", "host", "pid", "worker", "node", "train_seconds"}


def classification_table(path: Path, rows: int = 240, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3))
    label = np.where(x[:, 0] + 0.5 * x[:, 1] > 0.3, "b", np.where(x[:, 2] > 0, "a", "c"))
    lines = ["x0,x1,x2,label"] + [f"{a:.6f},{b:.6f},{c:.6f},{y}" for (a, b, c), y in zip(x, label)]
    path.write_text("\n".join(lines) + "\n")


def run(worktree: str, out: str) -> None:
    out_dir = Path(out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    classification_table(out_dir / "classes.csv")
    env = {**os.environ, "PYTHONPATH": str(Path(worktree).resolve()), "PYTHONHASHSEED": "0",
           "CUDA_VISIBLE_DEVICES": "", "TF_DETERMINISTIC_OPS": "1"}
    for case, args in CASES.items():
        run_dir = out_dir / case
        (out_dir / f"{case}-report").mkdir(exist_ok=True)
        command = [sys.executable, "-m", "autodeuq", "run", *[a.format(out=out_dir) for a in args], *COMMON,
                   "--run-dir", str(run_dir), "--out", str(out_dir / f"{case}-ensemble.json")]
        print(" ".join(command), flush=True)
        subprocess.run(command, env=env, check=True, cwd=out_dir / f"{case}-report")


def _weights(blob: bytes) -> dict:
    import h5py

    arrays = {}
    with h5py.File(io.BytesIO(blob), "r") as f:
        f.visititems(lambda name, obj: arrays.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return arrays


def _network(path: Path) -> dict:
    with zipfile.ZipFile(path) as z:
        parts = {"config.json": json.loads(z.read("config.json"))}
        for name in z.namelist():
            if name.endswith(".h5"):
                parts.update({f"{name}:{k}": v for k, v in _weights(z.read(name)).items()})
    return parts


def _entries(run_dir: Path) -> dict:
    con = sqlite3.connect(f"file:{run_dir / 'catalog.sqlite'}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    table = "evaluations"
    rows = {}
    for row in con.execute(f"select * from {table}"):
        entry = {k: row[k] for k in row.keys() if k not in CLOCK_COLUMNS and not k.endswith("_time")}
        entry.pop("model_sha256", None)  # of a .keras zip, which holds its save time: the weights are compared
        if entry.get("extra_json"):
            extra = json.loads(entry["extra_json"])
            extra.pop("timing", None)  # seconds measured
            entry["extra_json"] = extra
        rows[row["id"]] = entry
    con.close()
    return rows


def _fold_names(run: Path) -> dict[str, str]:
    """Fold network id -> ``fold-<entry>-<k>``: a cross-fit numbers its fold networks in the order
    their trainings were planned, longest expected first, and the expectation is measured (the
    search's seconds), so the same network may get another id from run to run."""
    con = sqlite3.connect(run / "catalog.sqlite")
    try:
        rows = con.execute("select id, entry, fold from folds").fetchall()
    except sqlite3.OperationalError:  # no folds table: not cross-fitted
        rows = []
    con.close()
    return {str(i): f"fold-{entry}-{fold}" for i, entry, fold in rows}


def _manifest(path: Path, folds: dict[str, str]) -> dict:
    """The saved ensemble less what depends on the clock: its members (ids, weights, files) without
    the refitted files' checksums and sizes (the ``.keras`` zip holds its save time), the
    selection's record without the refit's and the cross-fit's seconds; fold networks by
    :func:`_fold_names`."""
    manifest = json.loads(path.read_text())
    for member in manifest.get("members", []):
        member.pop("sha256", None)
        member.pop("bytes", None)
        if str(member.get("id")) in folds:
            member["id"] = member["model"] = folds[str(member["id"])]
    (manifest.get("selection") or {}).get("refit", {}).pop("seconds", None)
    (manifest.get("selection") or {}).get("crossfit", {}).pop("seconds", None)
    manifest.pop("run_dir", None)
    return manifest


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return a == b


def compare(a: str, b: str) -> int:
    differences = []

    def check(where, x, y):
        if not _same(x, y):
            differences.append(where)

    for case in CASES:
        ra, rb = Path(a) / case, Path(b) / case
        ea, eb = _entries(ra), _entries(rb)
        sa, sb = (json.loads((r / "meta.json").read_text())["search"] for r in (ra, rb))
        check(f"{case}: the search recorded (meta.json)", sa, sb)
        check(f"{case}: entry ids", sorted(ea), sorted(eb))
        for i in sorted(set(ea) & set(eb)):
            for column in sorted(set(ea[i]) | set(eb[i])):
                check(f"{case}: entry {i} {column}", ea[i].get(column), eb[i].get(column))
        fa, fb = _fold_names(ra), _fold_names(rb)
        for folder, reader in (("models", _network), ("predictions", lambda p: dict(np.load(p)))):
            files_a, files_b = ({folds.get(p.stem, p.stem) + p.suffix: p for p in (r / folder).glob("*")
                                 if not p.name.startswith(".")} for r, folds in ((ra, fa), (rb, fb)))
            names = sorted(files_a)
            check(f"{case}: {folder}/ files", names, sorted(files_b))
            for name in sorted(set(files_a) & set(files_b)):
                pa, pb = reader(files_a[name]), reader(files_b[name])
                check(f"{case}: {folder}/{name} arrays", sorted(pa), sorted(pb))
                for key in sorted(set(pa) & set(pb)):
                    check(f"{case}: {folder}/{name} {key}", pa[key], pb[key])
        ma, mb = (_manifest(Path(d) / f"{case}-ensemble.json", folds) for d, folds in ((a, fa), (b, fb)))
        for key in sorted(set(ma) | set(mb)):
            check(f"{case}: ensemble {key}", ma.get(key), mb.get(key))
        refit_a, refit_b = Path(a) / f"{case}-ensemble_refit", Path(b) / f"{case}-ensemble_refit"
        names = sorted(p.name for p in refit_a.glob("*.keras"))
        check(f"{case}: refitted networks", names, sorted(p.name for p in refit_b.glob("*.keras")))
        for name in names:
            pa, pb = _network(refit_a / name), _network(refit_b / name)
            for key in sorted(set(pa) | set(pb)):
                check(f"{case}: refitted {name} {key}", pa.get(key), pb.get(key))
        n_models = len(list((ra / "models").glob("*.keras")))
        print(f"{case}: {len(ea)} entries, {n_models} networks compared")
    for line in differences:
        print("DIFFERENT:", line)
    print("identical" if not differences else f"{len(differences)} difference(s)")
    return 1 if differences else 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("run", "compare"):
        sys.exit(__doc__)
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    else:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
