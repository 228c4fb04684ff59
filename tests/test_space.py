"""Search-space files: validation of their values, and the shipped spaces."""
import copy

import numpy as np
import pytest

from autodeuq.space import SearchSpace, SpaceError, load_space

SPEC = {
    "architecture": {"num_cells": 2, "skip_window": 3, "units": {"min": 8, "max": 32, "step": 8},
                     "activations": ["relu", "tanh"]},
    "training": {
        "learning_rate": {"low": 1e-4, "high": 1e-1, "log": True},
        "batch_size": {"low": 1, "high": 32},
        "optimizer": ["adam"],
        "patience_reduce_lr": {"low": 0, "high": 20},
        "patience_early_stopping": {"low": 0, "high": 30},
    },
    "epochs": 5,
}


def spec_with(path, value):
    spec = copy.deepcopy(SPEC)
    *keys, last = path
    node = spec
    for key in keys:
        node = node[key]
    node[last] = value
    return spec


def refused(spec, *fragments):
    with pytest.raises(SpaceError) as info:
        SearchSpace(spec, source="my.yaml")
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_a_valid_spec_with_zero_patience_is_accepted():
    space = SearchSpace(SPEC)
    assert space.units == [8, 16, 24, 32] and space.configspace["patience_reduce_lr"].lower == 0


@pytest.mark.parametrize("low", [0, -4])
def test_batch_size_below_one_is_refused(low):
    refused(spec_with(("training", "batch_size"), {"low": low, "high": 32}),
            "my.yaml", "training.batch_size", "batch_size")


@pytest.mark.parametrize("units", [
    {"min": 8, "max": 10**6},
    {"min": 8, "max": 10**9, "step": 8},   # would build a list of 10**8 widths if not refused first
    [8, 10**9],
])
def test_absurd_layer_widths_are_refused(units):
    refused(spec_with(("architecture", "units"), units), "my.yaml", "architecture.units", "16384")


@pytest.mark.parametrize("path, value, fragments", [
    (("architecture", "num_cells"), 100000, ("architecture.num_cells", "100000", "64")),
    (("architecture", "skip_window"), 10**6, ("architecture.skip_window", "64")),
    (("epochs",), 10**9, ("top level.epochs", "100000")),
    (("max_steps_per_epoch",), 10**12, ("top level.max_steps_per_epoch",)),
    (("architecture", "units"), list(range(1, 2000)), ("architecture.units", "1999 widths", "1024")),
    (("architecture", "units"), [8, 16, 8], ("architecture.units", "8 listed more than once")),
    (("architecture", "activations"), ["relu"] * 5000, ("architecture.activations", "relu listed more than once")),
    (("architecture", "dropout"), [i / 5000 for i in range(2000)], ("architecture.dropout", "2000 rates")),
    (("training", "optimizer"), ["adam", "adam"], ("training.optimizer", "adam listed more than once")),
    (("training", "batch_size"), {"low": 1, "high": 2**40}, ("training.batch_size", "above the largest")),
    (("training", "patience_early_stopping"), {"low": 1, "high": 10**9}, ("training.patience_early_stopping",)),
    # each limit alone holds, the network they make together does not: 64 cells of 16384 units
    (("architecture", "num_cells"), 64, ()),
])
def test_every_size_in_a_space_file_is_bounded(path, value, fragments):
    spec = spec_with(path, value)
    if not fragments:
        spec["architecture"]["units"] = [16384]
        fragments = ("architecture", "64 cells of 16384 units", "weights")
    refused(spec, "my.yaml", *fragments)


def test_a_space_file_that_is_not_utf8_is_one_error(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("# espace de recherche \u00e9t\u00e9\nname: x\n".encode("latin-1"))
    with pytest.raises(SpaceError, match=r"latin1.yaml: not UTF-8 text \(byte 23, line 1\); save the space"):
        load_space(path)
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (2 << 20))
    with pytest.raises(SpaceError, match="huge.yaml: 2097152 bytes, larger than a search-space file can be"):
        load_space(huge)


def test_shipped_spaces_load_by_name():
    for name in ("toy", "tabular"):
        assert load_space(name).name == name


def test_unknown_space_lists_the_shipped_ones():
    with pytest.raises(SpaceError, match=r"shipped: \['tabular', 'toy'\]"):
        load_space("tabluar")


def test_batch_range_follows_the_row_count_when_the_space_bounds_steps_per_epoch():
    from autodeuq.space import SearchSpace, load_space

    spec = load_space("tabular").to_dict()
    spec["max_steps_per_epoch"] = 500
    del spec["max_units_per_row"]  # the widths' own rule: the next test
    space = SearchSpace(spec)
    assert space.for_rows(400) is space  # small data: every batch size keeps epochs short
    big = space.for_rows(32_926)
    hp = big.to_dict()["training"]["batch_size"]
    assert (hp["low"], hp["high"]) == (66, 256)  # ceil(32926 / 500)
    rng = np.random.default_rng(0)
    assert all(66 <= big.sample(rng)["hp"]["batch_size"] <= 256 for _ in range(200))
    huge = space.for_rows(1_000_000).to_dict()["training"]["batch_size"]
    assert (huge["low"], huge["high"]) == (2000, 4000)
    assert big.for_rows(32_926).to_dict() == big.to_dict()  # adapting twice changes nothing
    del spec["max_steps_per_epoch"]
    without = SearchSpace(spec)
    assert without.for_rows(10**6) is without
    spec["max_steps_per_epoch"] = 0
    with pytest.raises(SpaceError, match="max_steps_per_epoch"):
        SearchSpace(spec)


def test_widths_follow_the_row_count_when_the_space_bounds_units_per_row():
    spec = load_space("tabular").to_dict()
    spec["max_units_per_row"] = 0.5
    space = SearchSpace(spec)
    yacht = space.for_rows(222)  # half the rows is 111: the widths stop at 112, the next step
    assert yacht.units == list(range(16, 113, 16))
    assert yacht.to_dict()["architecture"]["units"] == {"min": 16, "max": 112, "step": 16}
    assert yacht.dense_choices == 1 + 7 * len(space.activations)
    rng = np.random.default_rng(0)
    widths = {cell.units for _ in range(50) for cell, _ in yacht.cells(yacht.sample(rng)["arch"])}
    assert max(w for w in widths if w is not None) == 112
    assert yacht.for_rows(222).to_dict() == yacht.to_dict()  # adapting twice changes nothing
    assert yacht.describe_sizes() == "widths 16-112, batch sizes 4-256"
    assert space.for_rows(10).units == [16]  # narrower than the narrowest width: that one stays
    assert space.for_rows(480).units[-1] == 240
    assert space.for_rows(481) is space  # 240.5 asks for 256, the whole range
    from_one = copy.deepcopy(spec)
    from_one["training"]["batch_size"]["low"] = 1
    both = SearchSpace({**from_one, "max_steps_per_epoch": 100}).for_rows(300)
    assert max(both.units) == 160 and both.to_dict()["training"]["batch_size"]["low"] == 3
    assert "batch sizes and widths for 300 rows" in both.source
    listed = SearchSpace(spec_with(("architecture", "units"), [64, 8, 32, 16]) | {"max_units_per_row": 1})
    assert listed.for_rows(20).units == [8, 32, 16]  # in its order, the widths up to 32, the narrowest >= 20


@pytest.mark.parametrize("value", [0, -1, True, "half", float("inf"), float("nan")])
def test_units_per_row_must_be_a_positive_number(value):
    with pytest.raises(SpaceError, match="max_units_per_row"):
        SearchSpace({**SPEC, "max_units_per_row": value})
