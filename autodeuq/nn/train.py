"""Train one configuration with the Gaussian NLL (Nix & Weigend 1994; Lakshminarayanan et al. 2017),
or a classifier with the categorical NLL (cross-entropy), on a compiled epoch loop.

The training's pieces live beside it: the losses (:mod:`autodeuq.nn.losses`), the per-epoch
bookkeeping (:mod:`autodeuq.nn.epochs`) and the compiled epoch (:mod:`autodeuq.nn.trainer`); this
module holds the training's entry point (:func:`train`), its epoch loop, the process-wide
settings around it and the prediction helpers, and re-exports the names that lived here.

Why not ``model.fit``: for the small tabular networks of the search, Keras' per-step and
per-epoch Python machinery (data adapters, callbacks, the validation pass) costs far more than
the arithmetic. Here one ``tf.function`` runs a *whole epoch* (seeded shuffle, every mini-batch
step, then the validation loss) on data held as tensors, and Python only does the per-epoch
bookkeeping of :class:`~autodeuq.nn.epochs.EpochBookkeeper`, which reproduces Keras' ``ReduceLROnPlateau`` and
``EarlyStopping(restore_best_weights=True)`` on the validation loss.

Choices that keep tracing cheap and rare:

* All trainable parameters live in one flat vector (laid out by :mod:`autodeuq.nn.flat`), and the
  epoch runs the network as plain ops on slices of it, with its backward pass written out
  (:class:`~autodeuq.nn.plan.NetworkProgram` over the network's plan, checked against the Keras
  model and ``tf.GradientTape`` in the tests). Every optimizer of the space is elementwise, so
  one fused update of the vector
  (:class:`~autodeuq.nn.optimizers.FlatOptimizer`) is the same arithmetic as Keras' per-variable
  updates, with far fewer ops to trace and run, and the best-weights snapshot is a single copy.
* The compiled epoch, built for a (network plan, optimizer) key (:attr:`~autodeuq.nn.plan.NetworkPlan.key`), is
  kept in a small LRU cache (:data:`~autodeuq.nn.trainer.TRAINER_CACHE_SIZE`). A later training with the same key
  (e.g. a search over training hyperparameters with a fixed architecture) reuses it after
  resetting the weights, the optimizer state and the shuffle generator: no retrace.
* The epoch is an explicit ``While`` loop traced without AutoGraph, its biases are slices
  of the vector used as they are (no reshape), and it is called as a concrete function that
  returns both losses in one tensor: fewer ops to trace, instantiate and run at every step, and
  one transfer to the host per epoch. None of this changes a number (the tests compare runs).
* On a machine without a visible GPU, the epoch is traced and run under TensorFlow's
  single-threaded executor (:func:`~autodeuq.nn.trainer._single_threaded_wanted`): its ops run one
  after the other anyway.

No Keras model is built during a training: the initial weights come from the plan, drawn as the
Keras layers draw them (:meth:`~autodeuq.nn.plan.NetworkPlan.initial_values`), and the ``.keras``
file is written from the plan and the kept weights (:func:`autodeuq.nn.keras_file.network_bytes`):
building the model and saving it through Keras was a large part of a small network's fixed cost
(``benchmarks/results/training_speed.md``).

Long-lived workers: Keras' session state and TensorFlow's cache of eager kernels are reset, and
garbage is collected fully, every :data:`FULL_GC_EVERY` trainings (:func:`_clear_state`); the
objects alive after the first training's imports are moved out of the garbage collector's sight
(``gc.freeze``), so that collecting the cyclic garbage of old trainings does not rescan
TensorFlow's own objects each time (a full collection is several times cheaper frozen). Keras'
``swish`` (``tf.nn.silu``, a ``tf.custom_gradient`` that pins every traced graph forever in TF
2.21) is replaced by :func:`autodeuq.nn.layers.swish`. The collection times and the memory held over
200 trainings are in ``benchmarks/results/training_speed.md``.

One training runs at a time per process (the global generators it seeds, Keras' session state,
and the Grappler switch of :func:`_graph_optimizer_off`, are per process).
"""
from __future__ import annotations

import contextlib
import gc
import math
import random
import time
import warnings

import keras
import numpy as np
import tensorflow as tf

from autodeuq.core.errors import SpaceError
from autodeuq.core.result import Status, TrainResult, worker_name
from autodeuq.nn.epochs import EpochBookkeeper, EpochDecision  # noqa: F401  (re-exported)
from autodeuq.nn.keras_file import network_bytes
from autodeuq.nn.losses import (  # noqa: F401  (re-exported)
    CategoricalLoss,
    GaussianLoss,
    categorical_nll,
    categorical_nll_and_gradients,
    gaussian_nll,
    gaussian_nll_and_gradients,
    loss_of,
)
from autodeuq.nn.model import split_output
from autodeuq.nn.plan import NetworkPlan
from autodeuq.nn.trainer import (  # noqa: F401  (re-exported)
    _CACHE,
    NESTED_FUNCTION_OPS,
    CompiledTrainer,
    TrainerVariables,
    _checkin_trainer,
    _checkout_trainer,
    _runs_nested_functions,
    _single_threaded,
    _single_threaded_wanted,
    clear_trainer_cache,
    reset_generator,
    thread_variables,
)

FULL_GC_EVERY = 20  # trainings between full garbage collections
GRAPPLER_IN_TRAINING = False  # see _graph_optimizer_off


# --------------------------------------------------------------------------- threads
def configure_threads(n: int, inter_op: int | None = None) -> bool:
    """Limit TensorFlow's CPU thread pools (intra-op to ``n``, inter-op to ``inter_op or n``).

    TensorFlow fixes its pools when it runs its first operation; after that this is a no-op with
    a ``RuntimeWarning`` (unless the pools already have the requested sizes).

    Returns
    -------
    bool
        Whether the pools now have the requested sizes.
    """
    n = int(n)
    inter = int(inter_op or n)
    if n < 1 or inter < 1:
        raise ValueError(f"thread counts must be >= 1, got intra={n}, inter={inter}")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(n)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
        return True
    except RuntimeError:
        warnings.warn(
            f"configure_threads({n}) ignored: TensorFlow already runs with intra-op "
            f"{tf.config.threading.get_intra_op_parallelism_threads()} / inter-op "
            f"{tf.config.threading.get_inter_op_parallelism_threads()} threads (0 = all cores); "
            "call it before any TensorFlow operation runs in this process",
            RuntimeWarning,
            stacklevel=2,
        )
        return False


# --------------------------------------------------------------------------- training
def _check_config(config, space, dataset) -> str | None:
    """Why this configuration cannot be trained on this data, or None."""
    try:
        space.validate(config)
    except SpaceError as exc:
        return str(exc)
    if len(dataset.x_train) < 1 or len(dataset.x_valid) < 1:
        return "the dataset needs at least one training and one validation row"
    y_std = np.asarray(dataset.scaler.y_std, dtype=float)
    if not np.all(np.isfinite(y_std) & (y_std > 0)):
        return (f"target standard deviation(s) {y_std.tolist()} on the training split: "
                "a constant target cannot be standardized")
    return None


_trainings_since_gc = -1  # -1: nothing frozen yet


def _clear_state():
    """Every :data:`FULL_GC_EVERY` trainings: reset Keras' global state and TensorFlow's cache of
    eager kernels (``keras.backend.clear_session``), and collect garbage fully.

    Both are done in batches. A full ``gc.collect()`` costs more than many whole trainings once
    TensorFlow is imported (``benchmarks/results/training_speed.md``), so the cyclic garbage of
    old trainings is collected every so many, and the objects that exist before the first
    training (modules, TensorFlow's registries) are frozen once, so that collections, the
    automatic ones included, skip them. And emptying the kernel cache makes the next training
    build the kernel of each eager op it runs again (resetting the variables, drawing the initial
    weights), a sizeable part of its fixed cost; a training builds no Keras model, so the cache
    and Keras' state only need letting go of what trainings gone left there.
    """
    global _trainings_since_gc
    if _trainings_since_gc < 0:
        gc.freeze()
        _trainings_since_gc = 0
    _trainings_since_gc += 1
    if _trainings_since_gc >= FULL_GC_EVERY:
        keras.backend.clear_session(free_memory=False)
        gc.collect()
        _trainings_since_gc = 0


def _seed_generators(seed: int):
    """Seed Python's and NumPy's global generators, as ``keras.utils.set_random_seed(seed)`` does:
    a network's initial weights are drawn from seeds that Python's generator gives
    (:meth:`~autodeuq.nn.plan.NetworkPlan.initial_values`, as Keras' layers draw them).

    Not TensorFlow's global seed, which ``keras.utils.set_random_seed`` sets too: nothing in a
    training draws from it (the shuffles and dropout draw from the trainer's own generator), and
    setting it empties TensorFlow's cache of eager kernels (see :func:`_clear_state`).
    """
    random.seed(seed)
    np.random.seed(seed)


def _seed32(seed) -> int:
    """A non-negative seed as ``numpy.random.seed`` accepts one (below 2**32)."""
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if seed < 2**32:
        return seed
    return int(np.random.SeedSequence(seed).generate_state(1, np.uint32)[0])


def train(config, space, dataset, *, seed: int = 0, epochs: int | None = None,
          threads: int | None = None, discarder=None, schedule=None,
          time_limit: float | None = None) -> TrainResult:
    # Complexity 11: the one try block that turns every failure of a training into its result.
    """Train one configuration; never raises (problems become a failed :class:`TrainResult`).

    Parameters
    ----------
    config : dict
        ``{"arch": [...], "hp": {...}}`` (see :mod:`autodeuq.search.space`).
    space : SearchSpace
        Decodes the architecture; gives the default epoch budget.
    dataset : Dataset
        Original-unit arrays and the training-split ``scaler``.
    seed : int
        Seeds the initial weights and the per-epoch shuffles (reproducible on CPU). This also
        reseeds Python's and NumPy's global generators (:func:`_seed_generators`; TensorFlow's
        global seed is left as it is). Any non-negative integer; one of 2**32 or more is first
        reduced to 32 bits with ``numpy.random.SeedSequence``.
    epochs : int, optional
        Epoch budget; ``space.epochs`` when omitted (or 0).
    threads : int, optional
        Passed to :func:`configure_threads` (only effective before TensorFlow starts).
    discarder : SuccessiveHalving, optional
        Early discarding (:mod:`autodeuq.discard`): at each of its rungs (counted in epochs, or in
        optimizer steps, which this training's batch size turns into epochs) the training reports
        its best validation loss so far and stops if told to; the result is then ``"discarded"``,
        with the model and predictions of its best epoch so far.
    schedule : sequence of float, optional
        A refit: train exactly ``len(schedule)`` epochs, epoch ``k`` with learning rate
        ``schedule[k]`` (e.g. the rates an earlier training used up to its best epoch), without
        early stopping or plateau reductions, and keep the weights of the last epoch. The
        validation data then only gives the reported losses. Replaces ``epochs``.
    time_limit : float, optional
        Seconds this training may take, counted from its start: after an epoch, when another
        epoch as long as that one would end past the limit, training ends there, like an early
        stop (the best epoch so far is kept; ``extra["out_of_time"]`` says so). At least one epoch
        runs; a schedule (a refit) ignores it.

    Returns
    -------
    TrainResult
        ``objective`` = minimum validation NLL (standardized units) over the epochs,
        ``best_epoch`` its 1-based epoch, ``model_bytes`` the original-unit model with the weights
        of that epoch, ``valid_mean`` / ``valid_var`` its validation predictions (original units).
        ``extra`` holds the effective batch size, early-stopping and learning-rate facts, the
        number of traces this training caused, and a timing breakdown in seconds.

    Examples
    --------
    >>> space, data = load_space("toy"), toy_sine()
    >>> result = train(space.sample(np.random.default_rng(0)), space, data, epochs=5)
    >>> str(result.status), len(result.history["val_loss"]) <= 5
    ('done', True)
    """
    start_time = time.time()
    t0 = time.perf_counter()
    worker = worker_name()
    history: dict[str, list[float]] = {"loss": [], "val_loss": [], "lr": []}

    def failure(reason, **kwargs):
        return TrainResult.failure(reason=reason, epochs=len(history["loss"]), history=history,
                                   wall_time=time.perf_counter() - t0, worker=worker,
                                   start_time=start_time, end_time=time.time(), **kwargs)

    try:
        if threads:
            configure_threads(threads)
        reason = _check_config(config, space, dataset)
        if schedule is not None:
            schedule = [float(lr) for lr in schedule]
            if reason is None and not all(math.isfinite(lr) and lr > 0 for lr in schedule):
                reason = f"a schedule needs positive learning rates, got {schedule}"
        max_epochs = len(schedule) if schedule is not None else int(epochs or space.epochs)
        if reason is None and max_epochs < 1:
            reason = f"the epoch budget must be >= 1, got {max_epochs}"
        if reason is not None:
            return failure(reason)
        arch, hp = space.split(config)
        scaler = dataset.scaler
        n_features, n_targets = dataset.x_train.shape[1], dataset.y_train.shape[1]
        n_classes = dataset.labels.n_classes if dataset.is_classification else None
        batch_size = min(int(hp["batch_size"]), len(dataset.x_train))

        seed = _seed32(seed)
        _clear_state()
        _seed_generators(seed)
        plan = NetworkPlan.from_arch(space, arch, n_features, n_targets, n_classes)
        initial_weights, initial_state = plan.initial_values()  # the Keras model's, without building it
        n_params = plan.n_params
        key, trainer, reused = _checkout_trainer(plan, hp["optimizer"])
        traces_before = trainer.traces
        trainer.reset(initial_weights, hp["learning_rate"] if schedule is None else schedule[0], seed,
                      initial_state)
        tensors = tuple(tf.constant(np.asarray(a, dtype=np.float32)) for a in (
            scaler.transform_x(dataset.x_train), _training_targets(dataset, "train"),
            scaler.transform_x(dataset.x_valid), _training_targets(dataset, "valid"),
        )) + (tf.constant(batch_size, tf.int32),)
        book = EpochBookkeeper(hp["learning_rate"], hp["patience_reduce_lr"], hp["patience_early_stopping"])
        t_setup = time.perf_counter()

        limit = None if time_limit is None or schedule is not None else t0 + float(time_limit)
        with _graph_optimizer_off():
            reason, t_first, best_out, ended = _run_epochs(trainer, tensors, book, max_epochs, history,
                                                           discarder, schedule, limit, batch_size)
        discarded = ended == "discarded"
        traces = trainer.traces - traces_before
        _checkin_trainer(key, trainer)  # reusable even after a failure: reset() starts it afresh
        t_loop = time.perf_counter()
        if reason is not None:
            return failure(f"{reason} (optimizer={hp['optimizer']}, learning_rate={hp['learning_rate']:g})",
                           n_params=n_params)

        # the best epoch's validation pass ran with exactly the weights kept
        if n_classes is not None:
            valid_mean = valid_var = None
            valid_proba = _probabilities(best_out)
        else:
            valid_mean, valid_var = scaler.inverse_y(*split_output(best_out.astype(np.float64)))
            valid_proba = None
        model_bytes = network_bytes(plan, trainer.best_weights(), trainer.best_state_values(), scaler,
                                    classifier=n_classes is not None)
        t_end = time.perf_counter()
        return TrainResult(
            status=Status.DISCARDED if discarded else Status.DONE,
            objective=float(book.best),
            epochs=len(history["loss"]),
            best_epoch=book.best_epoch + 1,
            wall_time=t_end - t0,
            n_params=n_params,
            model_bytes=model_bytes,
            valid_mean=valid_mean,
            valid_var=valid_var,
            valid_proba=valid_proba,
            history=history,
            worker=worker,
            start_time=start_time,
            end_time=time.time(),
            extra={
                "batch_size": batch_size,
                "stopped_early": book.stopped_epoch is not None,
                "discarded_at": len(history["loss"]) if discarded else None,
                "out_of_time": ended == "out_of_time",
                "lr_reductions": book.lr_reductions,
                "traces": traces,
                "reused_trace": reused,
                "timing": {"setup": t_setup - t0, "first_epoch": t_first - t_setup,
                           "other_epochs": t_loop - t_first, "finish": t_end - t_loop},
            },
        )
    except Exception as exc:  # a training never takes its worker down
        return failure(f"{type(exc).__name__}: {exc}".strip())


def _training_targets(dataset, part: str) -> np.ndarray:
    """The targets of the training or validation rows as the loss reads them: standardized, or a
    classifier's (class code, row weight, label smoothing) rows (weights and smoothing on the
    training rows only: the validation loss, which selects epochs and networks, is the plain log
    loss)."""
    y = getattr(dataset, f"y_{part}")
    if not dataset.is_classification:
        return dataset.scaler.transform_y(y)
    from autodeuq.table.labels import class_row_weights

    train = part == "train"
    weights = class_row_weights(y[:, 0], dataset.labels.n_classes, dataset.class_weight) if train else np.ones(len(y))
    smoothing = np.full(len(y), dataset.label_smoothing if train else 0.0)
    return np.column_stack([y[:, 0], weights, smoothing])


def _probabilities(log_proba) -> np.ndarray:
    """Class probabilities (float64, rows summing to 1) from float32 log-probabilities."""
    log_proba = np.asarray(log_proba, dtype=np.float64)
    proba = np.exp(log_proba - log_proba.max(axis=1, keepdims=True))
    return proba / proba.sum(axis=1, keepdims=True)


def _run_epochs(trainer: CompiledTrainer, tensors, book: EpochBookkeeper, max_epochs: int, history,  # noqa: C901
                discarder=None, schedule=None, limit: float | None = None, batch_size: int | None = None):
    # One branch per way an epoch loop ends (budget, early stop, rung, time, schedule): the loop
    # reads as the training's steps in order; split, its state would travel between functions.
    """The epoch loop; with a ``schedule`` of learning rates, those epochs and the last one's weights.
    ``limit``: a ``perf_counter`` time that no further epoch may be expected to end after;
    ``batch_size``: the training's, for a discarder whose rungs count optimizer steps.

    Returns
    -------
    reason : str or None
        Why training failed.
    t_first : float
        ``perf_counter`` at the end of the first epoch (the one that traces).
    best_out : ndarray or None
        Validation outputs (standardized units) of the best epoch.
    ended : str or None
        ``"discarded"`` when the discarder stopped the training at a rung, ``"out_of_time"`` when
        ``limit`` did, else None.
    """
    t_first = time.perf_counter()
    best_out = None
    rungs = discarder.schedule(max_epochs, batch_size) if discarder is not None else {}
    for epoch in range(max_epochs):
        epoch_start = time.perf_counter()
        if schedule is not None:
            book.lr = schedule[epoch]
            trainer.set_learning_rate(book.lr)
        lr_used = book.lr
        losses, valid_out = trainer.run_epoch(*tensors)
        loss, val_loss = (float(v) for v in losses.numpy())
        if epoch == 0:
            t_first = time.perf_counter()
        history["loss"].append(loss)
        history["val_loss"].append(val_loss)
        history["lr"].append(lr_used)
        if not (math.isfinite(loss) and math.isfinite(val_loss)):
            what = "training" if not math.isfinite(loss) else "validation"
            return (f"non-finite {what} loss at epoch {epoch + 1} (loss={loss}, val_loss={val_loss})", t_first,
                    None, None)
        decision = book.update(val_loss)
        if schedule is not None:
            trainer.snapshot()
            best_out = valid_out.numpy()
            continue
        if decision.is_best:
            trainer.snapshot()
            best_out = valid_out.numpy()
        if decision.reduce_lr:
            trainer.set_learning_rate(decision.new_lr)
        if decision.stop:
            break
        if any(not discarder.should_continue(rung, book.best) for rung in rungs.get(epoch + 1, ())):
            return None, t_first, best_out, "discarded"
        now = time.perf_counter()
        if limit is not None and epoch + 1 < max_epochs and now + (now - epoch_start) > limit:
            return None, t_first, best_out, "out_of_time"
    return None, t_first, best_out, None


@contextlib.contextmanager
def _graph_optimizer_off():
    """Run without Grappler while training (restoring the previous setting afterwards).

    Grappler makes the first call of a freshly traced epoch slower, a large share of a short
    training (``benchmarks/grappler.py``; times in ``benchmarks/results/training_speed.md``), and
    brought no measurable per-epoch gain on these small networks.
    The setting is process-wide: one training at a time per process.
    """
    if GRAPPLER_IN_TRAINING:
        yield
        return
    previous = bool(tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False))
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": previous})


def _outputs(model: keras.Model, x, batch_size: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[:, None]
    chunks = [np.asarray(model(x[i:i + batch_size], training=False)) for i in range(0, len(x), batch_size)]
    out = np.concatenate(chunks, axis=0) if chunks else np.zeros((0, model.output_shape[-1]), np.float32)
    return out.astype(np.float64)


def predict_log_proba(model: keras.Model, x, batch_size: int = 65536) -> np.ndarray:
    """Class log-probabilities (n, K), float64, of a classifier's network (which outputs logits)."""
    logits = _outputs(model, x, batch_size)
    return logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)


def predict(model: keras.Model, x, batch_size: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """Means and variances of an original-unit model (see :func:`~autodeuq.nn.model.with_scaling`).

    Returns
    -------
    mean, var : ndarray of shape (n, T), float64, original units
    """
    return split_output(_outputs(model, x, batch_size))
