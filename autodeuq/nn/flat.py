"""The layout of a network's weights in one flat float32 vector, as the trainer keeps them.

:mod:`autodeuq.nn.train` holds every trainable parameter of a network in one vector and, at every
step, splits it into the network's weights. TensorFlow's ``SplitV`` returns pieces that share the
vector's memory only when the size of *every* piece is a multiple of 64 bytes; otherwise it
copies the whole vector, once per step (what that costs a large network's training:
``benchmarks/results/training_speed.md``). So each weight starts at a
multiple of :data:`ALIGN` entries, a weight whose size is not such a multiple being followed by
zeros up to the next one: :func:`split` cuts the vector into these padded pieces (no copy) and
trims the padded ones (a copy of that weight alone: in the search spaces' networks, the output
layer's bias), and :func:`join` pads the gradients likewise, with zeros. Trimming copies the
weight, so where more than :data:`MAX_TRIMMED` weights would need it (a space whose widths are
not multiples of 16), the trimmed copies would add up to about what the split copies, in more
ops: such a layout is left unpadded, and the split copies the vector as before.

The padding entries are never read as weights, and their gradient is zero, so every optimizer of
:mod:`autodeuq.nn.optimizers` leaves them at zero. A training's numbers are those of the unpadded
vector but for one kernel: the padding moves the vector's last entries from the scalar tail of
an update's loop into its vector part, and TensorFlow's Adadelta kernel computes the two parts
to different last bits (its reciprocal square root), so Adadelta's trainings end in other last
digits than before the padding (``tests/test_flat.py`` shows which kernels do not).
TensorFlow is imported on first use (see :mod:`autodeuq._lazy`).
"""
from __future__ import annotations

import numpy as np

from autodeuq._lazy import tf

ALIGN = 16  #: float32 entries in 64 bytes, the alignment TensorFlow asks of a piece it need not copy
MAX_TRIMMED = 2  #: weights a padded layout may trim (more: the layout is not padded)


class FlatLayout:
    """Where each of a list of arrays (of ``shapes``) lies in one flat vector.

    Attributes
    ----------
    shapes : tuple of tuple of int
        The arrays' shapes, in order.
    sizes : tuple of int
        Their numbers of entries.
    pads : tuple of int
        The zeros after each (fewer than :data:`ALIGN`; none at all where more than
        :data:`MAX_TRIMMED` weights would need them).
    size : int
        The vector's length, padding included.

    Examples
    --------
    >>> layout = FlatLayout([(2, 3), (3,)])
    >>> layout.pads, layout.size
    ((10, 13), 32)
    >>> [a.tolist() for a in layout.unflatten(layout.flatten([np.ones((2, 3)), np.arange(3)]))]
    [[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], [0.0, 1.0, 2.0]]
    """

    def __init__(self, shapes):
        self.shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        self.sizes = tuple(int(np.prod(s)) for s in self.shapes)
        pads = tuple(-n % ALIGN for n in self.sizes)
        self.pads = pads if sum(p > 0 for p in pads) <= MAX_TRIMMED else (0,) * len(pads)
        self.size = sum(self.sizes) + sum(self.pads)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(len(s) for s in self.shapes)

    def flatten(self, arrays) -> np.ndarray:
        """The arrays as one float32 vector, zeros in the padding."""
        flat = np.zeros(self.size, np.float32)
        for array, start, size in zip(arrays, self._starts(), self.sizes):
            flat[start:start + size] = np.asarray(array, np.float32).reshape(-1)
        return flat

    def unflatten(self, flat) -> list[np.ndarray]:
        """The arrays held in the vector ``flat`` (copies, of their shapes)."""
        flat = np.asarray(flat)
        return [flat[start:start + size].reshape(shape).copy()
                for start, size, shape in zip(self._starts(), self.sizes, self.shapes)]

    def _starts(self) -> list[int]:
        return np.cumsum((0,) + tuple(n + p for n, p in zip(self.sizes, self.pads)))[:-1].tolist()


def split(via, flat, layout: FlatLayout):
    """The vector ``flat`` (laid out as ``layout``) as its arrays, in a graph made through ``via``
    (:mod:`autodeuq.nn.splice`). The sizes and shapes enter the piece as constants, so that one piece
    serves every network whose weights have the same ranks and the same weights padded."""
    return via.call(("split",), _split, flat,
                    via.constant([n + p for n, p in zip(layout.sizes, layout.pads)], tf.int32),
                    [via.constant([n], tf.int32) if p else None for n, p in zip(layout.sizes, layout.pads)],
                    [None if len(s) == 1 else via.constant(s, tf.int32) for s in layout.shapes],
                    layout.ranks)


@tf.autograph.experimental.do_not_convert
def _split(flat, padded_sizes, trimmed_sizes, shapes, ranks):
    pieces = tf.split(flat, padded_sizes, num=len(ranks))
    arrays = []
    for piece, trimmed, shape, rank in zip(pieces, trimmed_sizes, shapes, ranks):
        if trimmed is not None:
            piece = tf.slice(piece, [0], trimmed)
        # a 1-D array (a bias) already has its shape: no Reshape op to trace and run every step
        arrays.append(piece if rank == 1 else tf.reshape(piece, shape))
    return arrays


def join(values, layout: FlatLayout):
    """The arrays ``values`` (of ``layout``'s shapes, in a graph) as one vector laid out as
    ``layout``, zeros in the padding. Its graph depends on the ranks and the padding: a piece of
    :mod:`autodeuq.nn.splice` that calls it is keyed by both (:func:`join_key`)."""
    flat = tf.constant([-1])
    parts = []
    for value, rank, pad in zip(values, layout.ranks, layout.pads):
        parts.append(value if rank == 1 else tf.reshape(value, flat))
        if pad:
            parts.append(tf.zeros([pad], value.dtype))
    return tf.concat(parts, axis=0)


def join_key(layout: FlatLayout) -> tuple:
    """What :func:`join`'s graph depends on, for a piece's key."""
    return layout.ranks, layout.pads
