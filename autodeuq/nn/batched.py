"""K copies of one configuration trained as one program: the networks of a cross-fit's folds.

A cross-fit (:mod:`autodeuq.ensemble.crossfit`) trains each configuration K times, once per fold,
each copy on its own rows, from the same initial weights. The K copies have the same shapes, so
here they run as one network with a leading copy dimension: the weights of copy ``k`` are row
``k`` of one ``[K, P]`` matrix, each layer a batched matrix product (``[K, B, in] @ [K, in,
out]``), and one compiled epoch (a ``tf.function``, one ``While`` over the mini-batches) steps
all the copies at once. Each copy keeps the algorithm of a single training
(:func:`autodeuq.nn.train.train`):

* its own training rows, standardized by its own scaler, in its own seeded order: the order of
  copy ``k``'s epoch is drawn from a generator seeded as a single training seeds its own, by the
  same draw (``argsort`` of ``uniform([n_k])``), so a copy shuffles as its single training would;
* its own per-epoch bookkeeping (:class:`~autodeuq.nn.epochs.EpochBookkeeper`): early stopping,
  best-weights restore and learning-rate plateaus on its own validation (held-out) rows, its own
  learning rate (a ``[K]`` vector);
* a copy that has stopped (or failed) is frozen: its update is masked out (its weights, its
  optimizer's slots and its step count stay as they are) while the others go on, and its best
  weights are those of its own best epoch.

Padding and masking. The copies' row counts differ (a fold's training part has one row more or
less than another's). Each copy's training rows are padded to the largest count ``n_max`` with
rows of zeros, which its shuffled order always puts last; the epoch runs ``ceil(n_max / b)``
mini-batches, and a row's loss is weighted by a mask (1 for a real row, 0 for a padding one), a
batch's loss being the mean over its real rows. A copy with fewer rows thus sees exactly its own
batches (its last one possibly shorter) and, where its rows end before the last batch, a batch
without real rows, for which its update is masked out (no step, as its single training would
not make one). The validation (held-out) rows are padded and masked the same way.

The optimizers are those of :mod:`autodeuq.nn.optimizers` (Keras' rules, with TensorFlow's fused
kernels' arithmetic) written as expressions on ``[K, P]`` tensors with a learning rate and a
step count per copy; the backward pass is written out as :mod:`autodeuq.nn.ops` writes each op's
(with the activations' gradient kernels), batched over the copies. The numbers are not
bit-identical to K single trainings (batched products and unfused updates round otherwise), but
the algorithm is the same: the tests compare a copy's losses with its single training's over the
first epochs, to float32 rounding.

Cost. On a CPU this program took about 3.4 times the CPU seconds of the K single trainings
(``benchmarks/results/crossfit/fold_training.md``): those run a spliced epoch under TensorFlow's
single-threaded executor with oneDNN products and fused optimizer kernels, so batching saves no
per-op overhead worth having there, while its batched products and unfused updates cost more per
row. The cross-fit therefore trains folds separately by default
(:data:`autodeuq.ensemble.crossfit.FOLD_TRAINING`); where per-op overhead dominates (a GPU's
kernel launches) batching is the expected gain, not measured here.

Not batched (:func:`batchable` says so; the caller trains those copies one by one): a network
with state (batch normalization). Dropout is batched, but draws its masks from a stateless
generator of its own, not from the single trainings' stream.
"""
from __future__ import annotations

import contextlib
import math
import time

import numpy as np
import tensorflow as tf

from autodeuq.core.result import Status, TrainResult, worker_name
from autodeuq.metrics import LOG_2PI
from autodeuq.nn import ops
from autodeuq.nn.epochs import EpochBookkeeper
from autodeuq.nn.keras_file import network_bytes
from autodeuq.nn.model import split_output
from autodeuq.nn.optimizers import ADADELTA_RHO, BETA_1, BETA_2, EPSILON, NADAM_DECAY, RMSPROP_RHO
from autodeuq.nn.plan import INPUT_NAME, NetworkPlan
from autodeuq.nn.train import _graph_optimizer_off
from autodeuq.nn.trainer import _single_threaded, _single_threaded_wanted, reset_generator

# --------------------------------------------------------------------------- optimizers on [K, P]
#: Per optimizer: its slots (per-parameter state, initial value) and scalars (per copy).
SLOTS = {"sgd": {}, "rmsprop": {"ms": 0.0}, "adagrad": {"accumulator": 0.1}, "adam": {"m": 0.0, "v": 0.0},
         "adadelta": {"accum": 0.0, "accum_update": 0.0}, "adamax": {"m": 0.0, "u": 0.0},
         "nadam": {"m": 0.0, "v": 0.0, "u_product": 1.0}}


def _update(name: str, params, grad, slots: dict, lr, step):
    """One step of optimizer ``name`` for every copy: ``(params, slots)`` after it. ``lr`` and
    ``step`` (1-based, float32) are ``[K, 1]``; the per-copy scalar ``u_product`` is ``[K, 1]``."""
    s = dict(slots)
    if name == "sgd":
        return params - lr * grad, s
    if name == "rmsprop":  # ResourceApplyRMSProp, momentum 0
        s["ms"] = s["ms"] + (tf.square(grad) - s["ms"]) * (1.0 - RMSPROP_RHO)
        return params - lr * grad / tf.sqrt(s["ms"] + EPSILON), s
    if name == "adagrad":  # Keras' expression
        s["accumulator"] = s["accumulator"] + tf.square(grad)
        return params - lr * grad / tf.sqrt(s["accumulator"] + EPSILON), s
    if name == "adam":  # ResourceApplyAdam
        s["m"] = s["m"] + (grad - s["m"]) * (1.0 - BETA_1)
        s["v"] = s["v"] + (tf.square(grad) - s["v"]) * (1.0 - BETA_2)
        lr_t = lr * tf.sqrt(1.0 - tf.pow(BETA_2, step)) / (1.0 - tf.pow(BETA_1, step))
        return params - lr_t * s["m"] / (tf.sqrt(s["v"]) + EPSILON), s
    if name == "adadelta":  # ResourceApplyAdadelta
        s["accum"] = s["accum"] * ADADELTA_RHO + tf.square(grad) * (1.0 - ADADELTA_RHO)
        update = tf.sqrt(s["accum_update"] + EPSILON) * tf.math.rsqrt(s["accum"] + EPSILON) * grad
        s["accum_update"] = s["accum_update"] * ADADELTA_RHO + tf.square(update) * (1.0 - ADADELTA_RHO)
        return params - lr * update, s
    if name == "adamax":  # ResourceApplyAdaMax
        s["m"] = s["m"] + (grad - s["m"]) * (1.0 - BETA_1)
        s["u"] = tf.maximum(BETA_2 * s["u"], tf.abs(grad))
        return params - (lr / (1.0 - tf.pow(BETA_1, step))) * (s["m"] / (s["u"] + EPSILON)), s
    if name == "nadam":  # Keras' expression
        u_t = BETA_1 * (1.0 - 0.5 * tf.pow(NADAM_DECAY, step))
        u_next = BETA_1 * (1.0 - 0.5 * tf.pow(NADAM_DECAY, step + 1.0))
        s["u_product"] = s["u_product"] * u_t
        s["m"] = s["m"] + (grad - s["m"]) * (1.0 - BETA_1)
        s["v"] = s["v"] + (tf.square(grad) - s["v"]) * (1.0 - BETA_2)
        m_hat = u_next * s["m"] / (1.0 - s["u_product"] * u_next) + (1.0 - u_t) * grad / (1.0 - s["u_product"])
        v_hat = s["v"] / (1.0 - tf.pow(BETA_2, step))
        return params - m_hat * lr / (tf.sqrt(v_hat) + EPSILON), s
    raise ValueError(f"optimizer {name!r} has no batched update")


# --------------------------------------------------------------------------- the batched network
def batchable(plan: NetworkPlan) -> bool:
    """Whether the copies of ``plan``'s network can train as one program (no op with state, and
    every op one this module runs batched)."""
    kinds = (ops.Dense, ops.Add, ops.Activation, ops.GaussianHead, ops.Dropout)
    return not plan.state_shapes() and all(type(op) in kinds for op in plan.ops)


class BatchedProgram:
    """The forward pass of ``K`` copies of a plan's network on ``[K, P]`` parameters."""

    def __init__(self, plan: NetworkPlan):
        if not batchable(plan):
            raise ValueError("this network's copies cannot train as one program (an op with state)")
        self.plan = plan
        self.steps = []  # (op, [(offset, shape) of its weights])
        offset = 0
        for op, weights, _ in plan.op_shapes():
            places = []
            for shape in weights:
                places.append((offset, tuple(int(d) for d in shape)))
                offset += int(np.prod(shape))
            self.steps.append((op, places))
        self.size = offset
        self.output = plan.ops[-1].name

    def flatten(self, weights) -> np.ndarray:
        """One copy's weights (the plan's order) as a vector of :attr:`size`."""
        return np.concatenate([np.asarray(w, np.float32).ravel() for w in weights]) if weights else np.zeros(0)

    def unflatten(self, flat) -> list[np.ndarray]:
        """One copy's vector as its list of weights."""
        return [np.asarray(flat[o:o + int(np.prod(s))], np.float32).reshape(s)
                for _, places in self.steps for o, s in places]

    def weights(self, params) -> list[list]:
        """Each op's weights, each ``[K, *shape]``, sliced from ``params`` ``[K, P]``."""
        return [[tf.reshape(params[:, o:o + int(np.prod(s))], [-1, *s]) for o, s in places] for _, places in self.steps]

    def forward(self, weights, x, training=False, seed=None):
        """The outputs of every copy, ``(mean, var)`` each ``[K, B, T]`` or ``(logits,)``, and
        what :meth:`backward` needs. ``weights`` from :meth:`weights`, ``x`` ``[K, B, F]``;
        ``seed`` (a stateless seed) for dropout in training."""
        values, saved = {INPUT_NAME: x}, {}
        for index, ((op, _), w) in enumerate(zip(self.steps, weights)):
            inputs = [values[i] for i in op.inputs]
            if isinstance(op, ops.Dense):
                z = tf.matmul(inputs[0], w[0]) + w[1][:, None, :]
                values[op.name] = op.activation.forward(z)
                saved[op.name] = z
            elif isinstance(op, ops.Add):
                values[op.name] = tf.add_n(inputs)
            elif isinstance(op, ops.Activation):
                values[op.name] = op.activation.forward(inputs[0])
            elif isinstance(op, ops.GaussianHead):
                mean, raw_var = tf.split(inputs[0], 2, axis=-1)
                values[op.name] = (mean, tf.nn.softplus(raw_var) + op.floor)
                saved[op.name] = raw_var
            elif isinstance(op, ops.Dropout):
                if not training or op.rate == 0.0:
                    values[op.name], saved[op.name] = inputs[0], None
                else:
                    u = tf.random.stateless_uniform(tf.shape(inputs[0]), seed=seed + tf.constant([0, 1]) * index)
                    scale = tf.where(u >= op.rate, 1.0 / (1.0 - op.rate), 0.0)
                    values[op.name], saved[op.name] = inputs[0] * scale, scale
        out = values[self.output]
        return (out if isinstance(out, tuple) else (out,)), (values, saved)

    def backward(self, weights, kept, d_outputs):
        """The gradient ``[K, P]`` of a loss w.r.t. ``params`` from its gradients w.r.t. the
        outputs, written out as :mod:`autodeuq.nn.ops` writes each op's (batched over the copies)."""
        values, saved = kept
        grads = [None] * len(self.steps)
        upstream = {self.output: [d_outputs[0] if len(d_outputs) == 1 else tuple(d_outputs)]}
        for index in reversed(range(len(self.steps))):
            op, _ = self.steps[index]
            pending = upstream.pop(op.name, [])
            if not pending:
                grads[index] = [tf.zeros_like(w) for w in weights[index]]
                continue
            d = pending[0] if len(pending) == 1 else tf.add_n(pending)
            inputs = [values[i] for i in op.inputs]
            if isinstance(op, ops.Dense):
                dz = op.activation.gradient(d, saved[op.name], values[op.name])
                grads[index] = [tf.matmul(inputs[0], dz, transpose_a=True), tf.reduce_sum(dz, axis=1)]
                d_inputs = [tf.matmul(dz, weights[index][0], transpose_b=True)]
            elif isinstance(op, ops.Add):
                d_inputs = [d] * len(inputs)
            elif isinstance(op, ops.Activation):
                d_inputs = [op.activation.gradient(d, inputs[0], values[op.name])]
            elif isinstance(op, ops.GaussianHead):
                d_mean, d_var = d
                d_inputs = [tf.concat([d_mean, d_var * tf.sigmoid(saved[op.name])], axis=-1)]
            else:  # Dropout
                d_inputs = [d if saved[op.name] is None else d * saved[op.name]]
            grads[index] = grads[index] or []
            for name, g in zip(op.inputs, d_inputs):
                if name != INPUT_NAME:
                    upstream.setdefault(name, []).append(g)
        flat = [tf.reshape(g, [tf.shape(g)[0], -1]) for gs in grads for g in gs]
        return tf.concat(flat, axis=1) if flat else None


def _losses_and_gradients(classifier: bool, y, outputs, mask):
    """Per copy, the mean loss over the real rows (``mask`` ``[K, B]``), those rows' count, and
    the gradients of the sum of the copies' losses w.r.t. the outputs (:mod:`autodeuq.nn.losses`'
    written out, each row's weighted by its mask over its copy's count)."""
    count = tf.reduce_sum(mask, axis=1)
    scale = (mask / tf.maximum(count, 1.0)[:, None])[..., None]  # [K, B, 1]
    if classifier:
        logits = outputs[0]
        log_p = tf.nn.log_softmax(logits)
        n_classes = tf.shape(logits)[-1]
        onehot = tf.one_hot(tf.cast(y[..., 0], tf.int32), n_classes, dtype=logits.dtype)
        weights, smoothing = y[..., 1:2], y[..., 2:3]
        target = (1.0 - smoothing) * onehot + smoothing / tf.cast(n_classes, logits.dtype)
        loss = -tf.reduce_sum(scale * weights * target * log_p, axis=[1, 2])
        return loss, count, (scale * weights * (tf.exp(log_p) - target),)
    mean, var = outputs
    n_targets = tf.cast(tf.shape(mean)[-1], mean.dtype)
    diff = mean - y
    entries = 0.5 * (LOG_2PI + tf.math.log(var)) + tf.square(diff) / (2.0 * var)
    loss = tf.reduce_sum(scale * entries, axis=[1, 2]) / n_targets
    scaled = scale / (n_targets * var)
    return loss, count, (diff * scaled, 0.5 * scaled * (1.0 - tf.square(diff) / var))


def _kept(classifier: bool, outputs):
    """The validation outputs kept per epoch (as :mod:`autodeuq.nn.losses` keeps them)."""
    return tf.nn.log_softmax(outputs[0]) if classifier else tf.concat(outputs, axis=-1)


class BatchedTrainer:
    """The compiled epoch of ``K`` copies of a plan's network under one optimizer."""

    def __init__(self, plan: NetworkPlan, optimizer: str):
        if optimizer not in SLOTS:
            raise ValueError(f"optimizer {optimizer!r} has no batched update")
        self.program = BatchedProgram(plan)
        self.optimizer = optimizer
        self.classifier = plan.n_classes is not None
        self.epoch = tf.function(self._epoch, autograph=False, reduce_retracing=True)

    def _epoch(self, params, slots, steps, lr, active, x, y, n, order, x_valid, y_valid, valid_mask, batch_size,
               seed):
        """One epoch of every copy. ``order`` ``[K, n_max]``: each copy's rows in its epoch's
        order, its padding last; ``n`` ``[K]`` its real rows; ``active`` ``[K]`` whether it
        trains. Returns the new ``(params, slots, steps)``, each copy's mean training loss and
        validation loss ``[K]`` and its kept validation outputs."""
        n_max = tf.shape(order)[1]
        x, y = tf.gather(x, order, batch_dims=1), tf.gather(y, order, batch_dims=1)
        positions = tf.range(n_max)
        real = tf.cast(positions[None, :] < n[:, None], tf.float32)  # [K, n_max]
        n_batches = (n_max + batch_size - 1) // batch_size
        names = sorted(slots)

        def body(i, params, slot_values, steps, total):
            start = i * batch_size
            stop = tf.minimum(start + batch_size, n_max)
            mask = real[:, start:stop]
            weights = self.program.weights(params)
            outputs, kept = self.program.forward(weights, x[:, start:stop], training=True,
                                                 seed=seed + tf.stack([0, i]))
            losses, count, d_outputs = _losses_and_gradients(self.classifier, y[:, start:stop], outputs, mask)
            grad = self.program.backward(weights, kept, d_outputs)
            moves = tf.logical_and(active, count > 0)  # a frozen copy, or one without rows here, is not stepped
            new_steps = steps + tf.cast(moves, tf.float32)
            new_params, new_slots = _update(self.optimizer, params, grad, dict(zip(names, slot_values)),
                                            lr[:, None], new_steps[:, None])
            keep = moves[:, None]
            params = tf.where(keep, new_params, params)
            slot_values = [tf.where(keep, new_slots[name], old) for name, old in zip(names, slot_values)]
            return i + 1, params, slot_values, new_steps, total + losses * count

        _, params, slot_values, steps, total = tf.while_loop(
            lambda i, *_: i < n_batches, body,
            [tf.constant(0), params, [slots[name] for name in names], steps, tf.zeros_like(lr)])
        outputs, _ = self.program.forward(self.program.weights(params), x_valid)
        val_loss, _, _ = _losses_and_gradients(self.classifier, y_valid, outputs, valid_mask)
        train_loss = total / tf.maximum(tf.cast(n, tf.float32), 1.0)
        return params, dict(zip(names, slot_values)), steps, train_loss, val_loss, _kept(self.classifier, outputs)


def _padded(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The arrays stacked ``[K, n_max, width]`` (zero rows appended) and the mask of real rows."""
    n_max = max(len(a) for a in arrays)
    out = np.zeros((len(arrays), n_max, arrays[0].shape[1]), np.float32)
    mask = np.zeros((len(arrays), n_max), np.float32)
    for k, a in enumerate(arrays):
        out[k, :len(a)] = a
        mask[k, :len(a)] = 1.0
    return out, mask


def train_copies(config, space, datasets, *, seed: int = 0, epochs: int | None = None) -> list[TrainResult]:
    """Train ``config`` on each of ``datasets`` (the same columns, their own rows and scaler), the
    copies as one program (see the module documentation); one result per dataset, as
    :func:`autodeuq.nn.train.train` gives for that dataset with the same ``seed`` and ``epochs``.

    Raises ``ValueError`` where the copies cannot train as one (:func:`batchable`); a copy whose
    loss becomes non-finite gets a failed result (the others go on).
    """
    from autodeuq.nn.train import _seed32, _seed_generators

    t0 = time.perf_counter()
    arch, hp = space.split(config)
    first = datasets[0]
    plan = NetworkPlan.from_arch(space, arch, first.x_train.shape[1], first.y_train.shape[1],
                                 first.labels.n_classes if first.is_classification else None)
    trainer = BatchedTrainer(plan, hp["optimizer"])
    seed = _seed32(seed)
    _seed_generators(seed)
    initial, _ = plan.initial_values()  # every copy starts from the weights of its single training
    run = _Run(trainer, datasets, hp, seed, initial)
    run.train(int(epochs or space.epochs))
    return run.results(plan, t0)


class _Run:
    """One batched training: the copies' inputs, their state between epochs, their bookkeeping."""

    def __init__(self, trainer: BatchedTrainer, datasets, hp: dict, seed: int, initial):
        from autodeuq.nn.train import _training_targets

        self.trainer, self.datasets, self.hp, self.seed = trainer, datasets, hp, seed
        self.start_time, self.worker = time.time(), worker_name()
        k, size = len(datasets), trainer.program.size
        self.params = tf.constant(np.tile(trainer.program.flatten(initial), (k, 1)))
        self.slots = {name: tf.fill([k, 1] if name == "u_product" else [k, size], np.float32(value))
                      for name, value in SLOTS[hp["optimizer"]].items()}
        self.steps = tf.zeros([k], tf.float32)
        x, _ = _padded([d.scaler.transform_x(d.x_train) for d in datasets])
        y, _ = _padded([np.asarray(_training_targets(d, "train"), np.float32) for d in datasets])
        x_valid, _ = _padded([d.scaler.transform_x(d.x_valid) for d in datasets])
        y_valid, valid_mask = _padded([np.asarray(_training_targets(d, "valid"), np.float32) for d in datasets])
        self.n_rows = np.array([len(d.x_train) for d in datasets], np.int32)
        self.batch_size = min(int(hp["batch_size"]), int(self.n_rows.max()))
        self.tensors = [tf.constant(a) for a in (x, y, self.n_rows)]
        self.valid = [tf.constant(a) for a in (x_valid, y_valid, valid_mask)]
        self.generators = [tf.random.Generator.from_seed(0) for _ in range(k)]
        for generator in self.generators:
            reset_generator(generator, seed)  # each copy's shuffles: its single training's
        self.books = [EpochBookkeeper(hp["learning_rate"], hp["patience_reduce_lr"], hp["patience_early_stopping"])
                      for _ in range(k)]
        self.histories = [{"loss": [], "val_loss": [], "lr": []} for _ in range(k)]
        self.active = np.ones(k, bool)
        self.reasons: list[str | None] = [None] * k
        self.best_params, self.best_out = self.params, [None] * k
        self.timing: dict[str, float] = {}

    def _order(self) -> np.ndarray:
        """Each copy's rows in its epoch's order, drawn as its single training draws them, its
        padding last."""
        n_max = int(self.n_rows.max())
        order = np.tile(np.arange(n_max, dtype=np.int32), (len(self.n_rows), 1))
        for c, generator in enumerate(self.generators):
            order[c, :self.n_rows[c]] = tf.argsort(generator.uniform([int(self.n_rows[c])])).numpy()
        return order

    def train(self, max_epochs: int):
        """Run epochs until every copy has stopped, failed or used ``max_epochs``."""
        executor = _single_threaded if _single_threaded_wanted() else contextlib.nullcontext
        t_setup = t_first = time.perf_counter()
        with _graph_optimizer_off():
            for epoch in range(max_epochs):
                if not self.active.any():
                    break
                lr = np.array([b.lr for b in self.books], np.float32)
                with executor():
                    self.params, self.slots, self.steps, losses, val_losses, kept = self.trainer.epoch(
                        self.params, self.slots, self.steps, tf.constant(lr), tf.constant(self.active),
                        *self.tensors, tf.constant(self._order()), *self.valid, tf.constant(self.batch_size),
                        tf.constant([self.seed % 2**31, epoch], tf.int32))
                if epoch == 0:
                    t_first = time.perf_counter()
                self._book(epoch, losses.numpy(), val_losses.numpy(), kept.numpy())
        self.timing = {"first_epoch": t_first - t_setup, "other_epochs": time.perf_counter() - t_first}

    def _book(self, epoch: int, losses, val_losses, kept):
        """Each active copy's epoch through its bookkeeper: its best weights kept, its rate, its stop."""
        improved = np.zeros(len(losses), bool)
        for c in np.flatnonzero(self.active):
            loss, val_loss = float(losses[c]), float(val_losses[c])
            history = self.histories[c]
            history["loss"].append(loss)
            history["val_loss"].append(val_loss)
            history["lr"].append(self.books[c].lr)
            if not (math.isfinite(loss) and math.isfinite(val_loss)):
                what = "training" if not math.isfinite(loss) else "validation"
                self.reasons[c] = (f"non-finite {what} loss at epoch {epoch + 1} (loss={loss}, val_loss={val_loss}) "
                                   f"(optimizer={self.hp['optimizer']}, learning_rate={self.hp['learning_rate']:g})")
                self.active[c] = False
                continue
            decision = self.books[c].update(val_loss)
            if decision.is_best:
                improved[c] = True
                self.best_out[c] = kept[c, :len(self.datasets[c].x_valid)]
            if decision.stop:
                self.active[c] = False
        if improved.any():
            self.best_params = tf.where(tf.constant(improved)[:, None], self.params, self.best_params)

    def results(self, plan: NetworkPlan, t0: float) -> list[TrainResult]:
        """One :class:`TrainResult` per copy, as a single training reports it."""
        from autodeuq.nn.train import _probabilities

        best, t_loop, k = self.best_params.numpy(), time.perf_counter(), len(self.datasets)
        classifier = plan.n_classes is not None
        results = []
        for c, dataset in enumerate(self.datasets):
            book = self.books[c]
            common = {"epochs": len(self.histories[c]["loss"]), "history": self.histories[c], "worker": self.worker,
                      "start_time": self.start_time, "n_params": plan.n_params}
            if self.reasons[c] is not None:
                results.append(TrainResult.failure(self.reasons[c], wall_time=(time.perf_counter() - t0) / k,
                                                   end_time=time.time(), **common))
                continue
            if classifier:
                valid_mean = valid_var = None
                valid_proba = _probabilities(self.best_out[c])
            else:
                valid_mean, valid_var = dataset.scaler.inverse_y(*split_output(self.best_out[c].astype(np.float64)))
                valid_proba = None
            model_bytes = network_bytes(plan, self.trainer.program.unflatten(best[c]), [], dataset.scaler,
                                        classifier=classifier)
            results.append(TrainResult(
                status=Status.DONE, objective=float(book.best), best_epoch=book.best_epoch + 1,
                wall_time=(time.perf_counter() - t0) / k, model_bytes=model_bytes, valid_mean=valid_mean,
                valid_var=valid_var, valid_proba=valid_proba, end_time=time.time(),
                extra={"batch_size": min(int(self.hp["batch_size"]), len(dataset.x_train)),
                       "stopped_early": book.stopped_epoch is not None, "discarded_at": None, "out_of_time": False,
                       "lr_reductions": book.lr_reductions, "batched": k,
                       "timing": {**self.timing, "finish": time.perf_counter() - t_loop}},
                **common))
        return results
