"""The checks of a saved ensemble's fields that every format shares (the JSON manifests of
:mod:`autodeuq.ensemble.manifest` and the ONNX file's metadata read by
:mod:`autodeuq.ensemble.onnx_members`): each raises :class:`~autodeuq.ensemble.members.ManifestError`
naming the file and the field at fault."""
from __future__ import annotations

import math
from pathlib import Path

from autodeuq.ensemble.members import ManifestError


def read_capped(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the file ``path`` (``what``: "ensemble manifest", say), read no further than
    ``limit`` bytes, or ManifestError saying why not: missing, unreadable or larger."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise ManifestError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ManifestError(f"{path}: larger than {limit} bytes: not an {what}")
    return data


def _selection_and_calibration(path: Path, manifest: dict) -> tuple[dict | None, dict | None]:
    selection, calibration = manifest.get("selection"), manifest.get("calibration")
    if calibration is not None and not isinstance(calibration, dict):
        raise ManifestError(f"{path}: 'calibration' must be an object or null, got {_short(calibration)}")
    return (selection if isinstance(selection, dict) else None), calibration


def _conformal(path: Path, manifest: dict) -> dict | None:
    """The manifest's conformal scores (an object, checked by the ensemble), or None: a manifest of an
    older autodeuq has none, and its ensemble's intervals are its mixture's."""
    conformal = manifest.get("conformal")
    if conformal is not None and not isinstance(conformal, dict):
        raise ManifestError(f"{path}: 'conformal' must be an object or absent, got {_short(conformal)}")
    return conformal


def _manifest_names(path: Path, manifest: dict, key: str) -> list[str]:
    names = manifest.get(key)
    if (not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names)
            or len(set(names)) != len(names)):
        raise ManifestError(f"{path}: '{key}' must be a non-empty list of distinct column names, got {_short(names)}")
    return names


def _manifest_members(path: Path, members) -> tuple[list[int], list[float]]:
    """(ids, weights) of a manifest's 'members', each checked, or ManifestError naming the entry."""
    if not isinstance(members, list) or not members:
        raise ManifestError(f"{path}: 'members' must be a non-empty list of {{\"id\": ..., \"weight\": ...}}, "
                            f"got {_short(members)}")
    ids, weights = [], []
    for k, member in enumerate(members):
        if not isinstance(member, dict):
            raise ManifestError(f"{path}: members[{k}] must be an object with 'id' and 'weight', got {_short(member)}")
        entry_id, weight = member.get("id"), member.get("weight")
        if not isinstance(entry_id, int) or isinstance(entry_id, bool) or not 1 <= entry_id < 2**63:
            raise ManifestError(f"{path}: members[{k}]: 'id' must be a catalog entry id (a positive integer), "
                                f"got {_short(entry_id)}")
        if (not isinstance(weight, (int, float)) or isinstance(weight, bool) or not math.isfinite(weight)
                or weight < 0):
            raise ManifestError(f"{path}: members[{k}]: 'weight' must be a finite non-negative number, "
                                f"got {_short(weight)}")
        ids.append(entry_id)
        weights.append(float(weight))
    return ids, weights


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
