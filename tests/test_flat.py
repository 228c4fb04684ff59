"""The flat parameter vector's layout (autodeuq.flat): every weight at a multiple of 64 bytes, so
that splitting the vector at every training step shares its memory instead of copying it, and
a training's numbers unchanged by the padding."""
import numpy as np
import pytest
import tensorflow as tf

import autodeuq.train as training
from autodeuq.flat import ALIGN, MAX_TRIMMED, FlatLayout, join, split
from autodeuq.optimizers import OPTIMIZERS
from autodeuq.plan import NetworkPlan, NetworkProgram
from autodeuq.space import load_space
from autodeuq.splice import DIRECT

SHAPES = [(8, 208), (208,), (208, 3), (3,), (5, 7, 2), (16,)]  # two weights to trim


def arrays(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_each_array_starts_at_a_multiple_of_align_entries_with_zeros_between():
    layout = FlatLayout(SHAPES)
    values = arrays(SHAPES)
    flat = layout.flatten(values)
    assert flat.dtype == np.float32 and flat.size == layout.size
    start = 0
    for value, size, pad in zip(values, layout.sizes, layout.pads):
        assert start % ALIGN == 0 and (size + pad) % ALIGN == 0 and 0 <= pad < ALIGN
        np.testing.assert_array_equal(flat[start:start + size], value.reshape(-1))
        assert not flat[start + size:start + size + pad].any()
        start += size + pad
    assert start == layout.size
    for back, value in zip(layout.unflatten(flat), values):
        assert back.shape == value.shape
        np.testing.assert_array_equal(back, value)


class _Memory:
    """A tensor's own memory, for ``np.from_dlpack`` (``Tensor.numpy`` returns a copy)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, stream=None, **kwargs):
        return tf.experimental.dlpack.to_dlpack(self.tensor)

    def __dlpack_device__(self):
        return 1, 0  # the CPU


def memory(tensor) -> np.ndarray:
    return np.from_dlpack(_Memory(tensor))


def test_a_layout_that_would_trim_most_weights_is_not_padded():
    """Trimming copies a weight: past MAX_TRIMMED of them, the layout stays unpadded (the split
    then copies the vector, as it did before padding)."""
    shapes = [(8, 33), (33,), (33, 17), (17,), (17, 2), (2,)]
    assert sum(-int(np.prod(s)) % ALIGN > 0 for s in shapes) > MAX_TRIMMED
    layout = FlatLayout(shapes)
    assert layout.pads == (0,) * len(shapes) and layout.size == sum(layout.sizes)
    values = arrays(shapes)
    np.testing.assert_array_equal(layout.flatten(values), np.concatenate([v.reshape(-1) for v in values]))
    for piece, value in zip(split(DIRECT, tf.constant(layout.flatten(values)), layout), values):
        np.testing.assert_array_equal(piece.numpy(), value)


def test_splitting_shares_the_vectors_memory_and_trims_the_padded_arrays():
    """TensorFlow's SplitV copies the whole vector unless every piece is a multiple of 64 bytes."""
    shapes = [(8, 16), (16,), (16, 2), (2,)]  # only the last is padded
    layout = FlatLayout(shapes)
    values = arrays(shapes)
    flat = tf.constant(layout.flatten(values))
    pieces = split(DIRECT, flat, layout)
    for piece, value, pad in zip(pieces, values, layout.pads):
        assert piece.shape == value.shape
        np.testing.assert_array_equal(piece.numpy(), value)
        assert np.shares_memory(memory(piece), memory(flat)) is (pad == 0)
    # the same arrays laid out unpadded: TensorFlow copies every piece
    unpadded = tf.constant(np.concatenate([v.reshape(-1) for v in values]))
    copies = tf.split(unpadded, [v.size for v in values])
    assert not any(np.shares_memory(memory(c), memory(unpadded)) for c in copies)


def test_joining_lays_gradients_out_as_the_parameters():
    layout = FlatLayout(SHAPES)
    values = arrays(SHAPES, seed=1)
    joined = join([tf.constant(v) for v in values], layout)
    np.testing.assert_array_equal(joined.numpy(), layout.flatten(values))


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_padding_stays_zero_through_a_training(name):
    """Zero gradients leave every optimizer's padding entries at zero, so the weights read back
    are those the trainer trained (the numbers against the unpadded trace are in test_splice.py
    and test_train.py)."""
    space = load_space("tabular")
    rng = np.random.default_rng(0)
    plan = NetworkPlan.from_arch(space, space.sample(rng)["arch"], 3, 1)
    trainer = training.CompiledTrainer(NetworkProgram(plan), name)
    assert any(trainer.layout.pads)  # the output layer's bias, at least
    x = rng.standard_normal((40, 3)).astype(np.float32)
    x, y = tf.constant(x), tf.constant(x[:, :1] * 2.0)
    initial, _ = plan.initial_values()
    trainer.reset(initial, 1e-2, 0)
    with training._graph_optimizer_off():
        for _ in range(2):
            trainer.run_epoch(x, y, x, y, tf.constant(8))
    params = trainer.params.numpy()
    padding = np.ones(trainer.layout.size, bool)
    padding[trainer.layout.flatten([np.ones(s) for s in trainer.layout.shapes]) != 0] = False
    assert not params[padding].any()
    assert np.isfinite(params).all() and not np.array_equal(params, trainer.layout.flatten(initial))


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_an_update_of_the_padded_vector_leaves_the_weights_as_the_unpadded_one(name):
    """The padding moves a vector's last entries out of an update loop's scalar tail: every
    optimizer's update of them is the same bit for bit, but for Adadelta's kernel, whose vector
    part rounds otherwise (within a few units in the last place)."""
    from autodeuq.optimizers import FlatOptimizer

    n, rng = 18, np.random.default_rng(3)
    start, grads = rng.standard_normal(n).astype(np.float32), rng.standard_normal((3, n)).astype(np.float32)
    results = []
    for size in (n, n + FlatLayout([(n,)]).pads[0]):
        optimizer = FlatOptimizer(name, size)
        optimizer.reset(1e-2)
        params = tf.Variable(np.pad(start, (0, size - n)))
        for grad in grads:
            optimizer.apply(tf.constant(np.pad(grad, (0, size - n))), params)
        results.append(params.numpy())
    unpadded, padded = results
    assert not padded[n:].any()
    if name == "adadelta":
        np.testing.assert_allclose(padded[:n], unpadded, rtol=8 * np.finfo(np.float32).eps)
    else:
        np.testing.assert_array_equal(padded[:n], unpadded)
