"""benchmarks/epoch_executor.py: both executors train the same configuration to the same losses,
and the script leaves the trainer's setting as it found it."""
import numpy as np

from autodeuq.nn import trainer
from autodeuq.space import load_space
from benchmarks.epoch_executor import main, one_training
from benchmarks.training_speed import boston_like


def test_both_executors_give_the_same_losses_and_their_costs():
    before = trainer.SINGLE_THREADED_EPOCHS
    space, data = load_space("tabular"), boston_like()
    config = space.sample(np.random.default_rng(1000))
    runs = [one_training(config, space, data, batch_size=64, epochs=3, single_threaded=s) for s in (False, True)]
    for whole, first, later, losses in runs:
        assert whole > first > 0 and later > 0 and len(losses) == 3
    assert (runs[0][3] == runs[1][3]).all()
    assert trainer.SINGLE_THREADED_EPOCHS is before


def test_the_report_line_and_the_setting_restored(capsys):
    main(["--configs", "1", "--epochs", "2", "--batch-sizes", "128"])
    out = capsys.readouterr().out
    assert "batch size  128: default: whole" in out and "largest validation-loss difference 0.0e+00" in out
    assert trainer.SINGLE_THREADED_EPOCHS is True  # the package's setting, as it was
