"""Training speed: autodeuq's compiled epoch loop against a plain Keras ``model.fit`` reference.

Problem: a synthetic regression of the size of boston (340 training / 170 validation rows,
13 features, heteroscedastic noise), generated here, nothing downloaded.

For each of ``--configs`` configurations sampled (fixed seeds) from the ``tabular`` space and each
batch size of ``--batch-sizes`` (the batch size is fixed, the rest of the configuration is kept),
the same network (same initial weights: same build, same seed) is trained twice:

* ``autodeuq.nn.train.train`` (whole-epoch ``tf.function``, Python bookkeeping per epoch);
* the reference: ``model.compile`` + ``model.fit`` with ``ReduceLROnPlateau`` and
  ``EarlyStopping(restore_best_weights=True)`` on ``val_loss`` (same patiences, Keras defaults
  otherwise), then the same finishing work as the product (original-unit model, validation
  predictions, ``.keras`` bytes).

Two ms/epoch figures per batch size: whole trainings (build, trace, epochs, finishing; total wall
time / epochs run; the headline ``speedup`` line is their geometric mean over batch sizes), and
the median duration of the epochs after the first (steady state). Epoch budget: the tabular
space's (100) with early stopping, unless ``--epochs`` says otherwise. The objective compared is
the minimum validation NLL (standardized units).

A second part trains ``--rss-trainings`` sampled configurations in a fresh process with the
product's trainer and prints the process RSS along the way, to show that state does not
accumulate.

Usage (from the repository root)::

    python benchmarks/training_speed.py                       # defaults: several minutes
    python benchmarks/training_speed.py --markdown benchmarks/results/training_speed.md
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import shlex
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autodeuq.nn.train import configure_threads  # (before TensorFlow runs anything)

LINES: list[str] = []


def say(text: str = ""):
    print(text, flush=True)
    LINES.append(text)


def boston_like(seed: int = 0):
    """340 train / 170 validation rows, 13 correlated features, nonlinear heteroscedastic target."""
    from autodeuq.table.data import from_arrays

    rng = np.random.default_rng(seed)
    n, d = 510, 13
    mixing = rng.normal(size=(d, d)) / np.sqrt(d)
    x = rng.normal(size=(n, d)) @ mixing + rng.uniform(0, 10, size=d)
    z = (x - x.mean(0)) / x.std(0)
    signal = 3.0 * np.tanh(z[:, 0]) + 2.0 * z[:, 1] * z[:, 2] + np.sin(2 * z[:, 3]) + 1.5 * z[:, 4]
    noise = rng.normal(size=n) * (0.5 + 0.8 * (z[:, 5] > 0))
    y = 22.5 + 3.0 * (signal + noise)
    return from_arrays(x[:340], y[:340], x[340:], y[340:], name="boston-like")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _epoch_clock_class():
    import keras

    class EpochClock(keras.callbacks.Callback):
        """Wall time of each epoch (training + validation), to compare steady-state epochs."""

        def __init__(self):
            super().__init__()
            self.ends = []

        def on_epoch_end(self, epoch, logs=None):
            self.ends.append(time.perf_counter())

        def steady_ms(self):
            gaps = np.diff(self.ends)
            return float(np.median(gaps) * 1000) if gaps.size else float("nan")

    return EpochClock


def keras_fit_reference(config, space, dataset, *, seed: int, epochs: int):
    """Plain Keras training of the same network.

    Returns (objective or nan, epochs run, seconds, median ms of the epochs after the first).
    """
    import keras
    import tensorflow as tf

    from autodeuq.nn.model import build_network, model_to_bytes, with_scaling
    from autodeuq.nn.optimizers import make_optimizer
    from autodeuq.nn.train import gaussian_nll, predict

    EpochClock = _epoch_clock_class()
    keras.backend.clear_session()  # outside the timing, like the product's session reset
    t0 = time.perf_counter()
    keras.utils.set_random_seed(seed)
    arch, hp = space.split(config)
    s = dataset.scaler
    core = build_network(space, arch, dataset.n_features, dataset.n_targets)

    def nll(y_true, out):
        t = tf.shape(y_true)[1]
        return gaussian_nll(y_true, out[:, :t], out[:, t:])

    core.compile(optimizer=make_optimizer(hp["optimizer"], hp["learning_rate"]), loss=nll)
    clock = EpochClock()
    callbacks = [
        clock,
        keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.1, patience=hp["patience_reduce_lr"]),
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=hp["patience_early_stopping"],
                                      restore_best_weights=True),
    ]
    f32 = lambda a: np.asarray(a, dtype=np.float32)  # noqa: E731
    history = core.fit(
        f32(s.transform_x(dataset.x_train)), f32(s.transform_y(dataset.y_train)),
        validation_data=(f32(s.transform_x(dataset.x_valid)), f32(s.transform_y(dataset.y_valid))),
        batch_size=min(int(hp["batch_size"]), len(dataset.x_train)), epochs=epochs, shuffle=True,
        callbacks=callbacks, verbose=0,
    ).history
    model = with_scaling(core, s)
    predict(model, dataset.x_valid)
    model_to_bytes(model)
    seconds = time.perf_counter() - t0
    val = np.asarray(history["val_loss"], dtype=float)
    objective = float(val.min()) if np.all(np.isfinite(val)) else float("nan")
    return objective, len(val), seconds, clock.steady_ms()


def stats(values) -> str:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    if v.size == 0:
        return "n/a"
    return f"min {v.min():.3f} / median {np.median(v):.3f} / max {v.max():.3f}"


def speed_part(args, space, dataset):
    from autodeuq.nn.train import clear_trainer_cache, train

    configs = [space.sample(np.random.default_rng(1000 + i)) for i in range(args.configs)]
    limited = ("" if args.epochs == space.epochs
               else f" (limited to keep the run short; the tabular space's is {space.epochs})")
    say(f"## Speed: {args.configs} configurations x batch sizes {args.batch_sizes}, "
        f"epoch budget {args.epochs}{limited}")
    say("")
    say("configurations (batch size overridden below):")
    for i, c in enumerate(configs):
        hp = c["hp"]
        say(f"  c{i}: {hp['optimizer']:>8} lr={hp['learning_rate']:.2e} patience_lr={hp['patience_reduce_lr']} "
            f"patience_es={hp['patience_early_stopping']} arch={c['arch']}")
    say("")
    # warm-up (TF kernels, Keras imports) outside the measurements, for both sides
    train(configs[0], space, dataset, seed=0, epochs=2)
    keras_fit_reference(configs[0], space, dataset, seed=0, epochs=2)
    clear_trainer_cache()  # no head start from the warm-up's trace

    speedups, steady_speedups, fixed = [], [], []
    all_prod, all_ref = [], []
    for bs in args.batch_sizes:
        prod_t = prod_e = ref_t = ref_e = 0.0
        prod_obj, ref_obj, loop_ms, ref_loop_ms, fails = [], [], [], [], [0, 0]
        for i, base in enumerate(configs):
            cfg = {"arch": list(base["arch"]), "hp": {**base["hp"], "batch_size": bs}}
            res = train(cfg, space, dataset, seed=i, epochs=args.epochs)
            prod_t += res.wall_time
            prod_e += res.epochs
            if res.ok:
                prod_obj.append(res.objective)
                timing = res.extra["timing"]
                if res.epochs > 1:
                    loop_ms.append(1000 * timing["other_epochs"] / (res.epochs - 1))
                fixed.append(timing["setup"] + timing["finish"] + timing["first_epoch"])
            else:
                prod_obj.append(float("nan"))
                fails[0] += 1
            obj, n_ep, secs, steady = keras_fit_reference(cfg, space, dataset, seed=i, epochs=args.epochs)
            ref_loop_ms.append(steady)
            ref_t += secs
            ref_e += n_ep
            ref_obj.append(obj)
            fails[1] += not np.isfinite(obj)
        prod_ms, ref_ms = 1000 * prod_t / prod_e, 1000 * ref_t / ref_e
        speedups.append(ref_ms / prod_ms)
        all_prod += prod_obj
        all_ref += ref_obj
        paired = [(p, r) for p, r in zip(prod_obj, ref_obj) if np.isfinite(p) and np.isfinite(r)]
        better = sum(p <= r for p, r in paired)
        diff = np.median([p - r for p, r in paired]) if paired else float("nan")
        steady_speedups.append(np.median(ref_loop_ms) / np.median(loop_ms))
        say(f"batch size {bs}:")
        say(f"  ms/epoch, whole trainings     autodeuq {prod_ms:7.1f}   keras fit {ref_ms:7.1f}   "
            f"speedup {ref_ms / prod_ms:.1f}x")
        say(f"  ms/epoch, epochs after the 1st autodeuq {np.median(loop_ms):7.1f}   keras fit "
            f"{np.median(ref_loop_ms):7.1f}   speedup {steady_speedups[-1]:.1f}x   (medians over configs)")
        say(f"  epochs run: autodeuq {int(prod_e)}, keras fit {int(ref_e)}; wall: autodeuq {prod_t:.1f} s, "
            f"keras fit {ref_t:.1f} s")
        say(f"  val NLL   autodeuq {stats(prod_obj)}   (failed {fails[0]})")
        say(f"            keras    {stats(ref_obj)}   (failed {fails[1]})")
        say(f"  paired: autodeuq <= keras in {better}/{len(paired)} configs, median difference {diff:+.4f}")
        say("")
    say(f"all batch sizes: val NLL median autodeuq {np.nanmedian(all_prod):.4f}, keras fit {np.nanmedian(all_ref):.4f}")
    say(f"autodeuq fixed cost per training (build, trace + first epoch, save): median {np.median(fixed):.2f} s")
    geo_steady = math.exp(np.mean(np.log(steady_speedups)))
    say(f"epochs after the first (steady state): geometric-mean speedup {geo_steady:.1f}x")
    return speedups


def rss_part(args, space, dataset):
    from autodeuq.nn import train as train_mod
    from autodeuq.nn import trainer as trainer_mod

    say(f"## Memory: {args.rss_trainings} trainings in one fresh process (autodeuq trainer, "
        f"{args.rss_epochs} epochs each, configurations sampled from the tabular space)")
    say(f"RSS after imports and data: {rss_mb():.0f} MB")
    t0 = time.perf_counter()
    failed = 0
    for i in range(1, args.rss_trainings + 1):
        cfg = space.sample(np.random.default_rng(5000 + i))
        res = train_mod.train(cfg, space, dataset, seed=i, epochs=args.rss_epochs)
        failed += not res.ok
        if i % 50 == 0 or i == 10:
            before = rss_mb()
            gc.collect()
            say(f"  after {i:4d} trainings: RSS {before:7.0f} MB, after a full gc {rss_mb():7.0f} MB   "
                f"({time.perf_counter() - t0:6.1f} s, {failed} failed)")
    say(f"(compiled-epoch cache holds at most {trainer_mod.TRAINER_CACHE_SIZE} entries; full gc every "
        f"{train_mod.FULL_GC_EVERY} trainings)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=None,
                        help="epoch budget of every training (default: the tabular space's own)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[4, 32, 256])
    parser.add_argument("--rss-trainings", type=int, default=200)
    parser.add_argument("--rss-epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1,
                        help="TensorFlow intra/inter-op threads, for both trainers (default 1: one "
                             "evaluation per core, as a search runs on this machine)")
    parser.add_argument("--part", choices=["all", "rss"], default="all", help=argparse.SUPPRESS)
    parser.add_argument("--markdown", help="also write the output to this Markdown file")
    parser.add_argument("--machine", default="2-core CPU dev machine", help="machine line of the Markdown file")
    args = parser.parse_args(argv)

    configure_threads(args.threads)
    import keras
    import tensorflow as tf

    from autodeuq.search.space import load_space

    space = load_space("tabular")
    args.epochs = args.epochs or space.epochs
    dataset = boston_like()
    say("# autodeuq training speed: compiled epoch loop vs keras model.fit")
    say(f"python {platform.python_version()}, tensorflow {tf.__version__}, keras {keras.__version__}, "
        f"{os.cpu_count()} CPUs, TF threads intra/inter = {args.threads}")
    say(f"data: synthetic boston-sized problem, {len(dataset.x_train)} train / {len(dataset.x_valid)} valid rows, "
        f"{dataset.n_features} features")
    say("")
    if args.part == "rss":
        rss_part(args, space, dataset)
        return
    t0 = time.perf_counter()
    speedups = speed_part(args, space, dataset)
    if args.rss_trainings:
        # a fresh interpreter: the Keras-fit reference above leaks (see autodeuq.nn.train), which
        # would blur this measurement
        child = [sys.executable, os.path.abspath(__file__), "--part", "rss", "--threads", str(args.threads),
                 "--rss-trainings", str(args.rss_trainings), "--rss-epochs", str(args.rss_epochs)]
        out = subprocess.run(child, capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if not line.startswith(("# ", "python ", "data: ")) and line.strip():
                say(line)
    say("")
    say(f"total benchmark time {time.perf_counter() - t0:.0f} s")
    geo = math.exp(np.mean(np.log(speedups)))
    say("headline: whole trainings (build, trace, every epoch, finishing), ms/epoch ratio keras fit / autodeuq,")
    say("geometric mean over the batch sizes:")
    say(f"speedup {geo:.1f}x")

    if args.markdown:
        command = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.executable), os.path.relpath(__file__)]
                           + sys.argv[1:])
        with open(args.markdown, "w") as f:
            f.write(f"command: `{command}`\n\nmachine: {args.machine}\n\n```\n")
            f.write("\n".join(LINES) + "\n```\n")


if __name__ == "__main__":
    main()
