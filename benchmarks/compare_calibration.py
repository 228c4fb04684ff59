"""Test scores of the same AutoDEUQ ensembles without and with the std recalibration.

Reads two results folders of ``benchmarks/uci.py`` (``uci_raw.json`` in each): BASE, whose
AutoDEUQ records were scored without recalibration, and CALIBRATED, where the same splits were
rescored with ``--rescore --calibrate scale`` (same catalogs, same selection and refit). Prints a
markdown table per (method, dataset): mean test NLL and 90 % interval coverage before and after,
the splits where the NLL rose, and the fitted scale factors.

    python benchmarks/compare_calibration.py benchmarks/results benchmarks/results/uci_calibrated
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def load(folder: Path) -> dict:
    records = json.loads((folder / "uci_raw.json").read_text())["records"]
    return {(r["method"], r["dataset"], r["split"]): r for r in records if r.get("status") == "done"}


def calibrated(record: dict) -> bool:
    return "calibrate=scale" in (record["info"].get("rescored") or {}).get("settings", "")


def table(base: dict, cal: dict) -> str:
    cells: dict[tuple[str, str], list] = {}
    for key, after in cal.items():
        before = base.get(key)
        if not calibrated(after) or before is None or calibrated(before):
            continue
        cells.setdefault(key[:2], []).append((before, after))
    lines = ["| method | dataset | rows | splits | test NLL before | after | change | splits worse | "
             "coverage 90 % before | after | scale |", "|---" * 11 + "|"]
    for (method, dataset), pairs in sorted(cells.items(), key=lambda kv: kv[1][0][0]["n_fit"] + kv[1][0][0]["n_valid"]):
        nll = np.array([[b["nll"], a["nll"]] for b, a in pairs])
        cov = np.array([[b["coverage_90"], a["coverage_90"]] for b, a in pairs])
        scales = ", ".join(f"{a['info']['std_scale'][0]:.2f}" for _, a in pairs)
        rows = pairs[0][0]["n_fit"] + pairs[0][0]["n_valid"]
        lines.append(f"| {method} | {dataset} | {rows} | {len(pairs)} | {nll[:, 0].mean():.3f} "
                     f"| {nll[:, 1].mean():.3f} "
                     f"| {nll[:, 1].mean() - nll[:, 0].mean():+.3f} | {int((nll[:, 1] > nll[:, 0]).sum())} "
                     f"| {cov[:, 0].mean():.3f} | {cov[:, 1].mean():.3f} | {scales} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base", type=Path)
    p.add_argument("calibrated", type=Path)
    args = p.parse_args(argv)
    print(table(load(args.base), load(args.calibrated)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
