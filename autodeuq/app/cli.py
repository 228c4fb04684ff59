"""Command line: ``autodeuq search | ensemble | predict | run | catalog``.

Every error of autodeuq's (an :class:`~autodeuq.core.errors.AutoDEUQError`) is one line on stderr
(``autodeuq: error: ...``) and exit status 2, no traceback; parameters are named by their options.
A search that produced nothing usable (every evaluation failed, or its first ones all failed the
same way) exits 1 with the most common failure reason; Ctrl-C exits 130, SIGTERM 143, both
leaving the run resumable. Any other exception is a bug: its traceback, a line asking to report
it, exit status 1.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
import traceback
import warnings
from pathlib import Path

from autodeuq.app.options import BY_NAME, add_option, add_to_parser, option_of
from autodeuq.core.errors import AutoDEUQError, AutoDEUQWarning, ParameterError, ParameterWarning
from autodeuq.table.data import BUILTIN_DATASETS
from autodeuq.tasks import get_task

EXIT_USAGE = 2
EXIT_INTERNAL = 1  # an unexpected exception (a bug), as for any Python program that dies of one
EXIT_SEARCH_FAILED = 1
PREDICT_COLUMNS = (
    "Columns, for each target, in the target's units: <target>_mean (predictive mean), <target>_std "
    "(total predictive standard deviation), <target>_aleatoric_std and <target>_epistemic_std (standard "
    "deviations of the two parts; their squares, the variances, add up: std^2 = aleatoric_std^2 + "
    "epistemic_std^2), and with --interval L, <target>_lower_<100 L> and <target>_upper_<100 L> (the L "
    "interval: conformal, mean +- q std with q from the ensemble's held-out scores, where the ensemble has them; "
    "else, or with --interval-method mixture, the central interval of the ensemble's Gaussian mixture). No "
    "column is a variance. "
    "A classifier's: <target>_pred (the most probable class), <target>_p_<class> (one probability per class), "
    "<target>_entropy (total, nats), <target>_aleatoric_entropy (the members' mean entropy) and "
    "<target>_epistemic_mi (their difference, the mutual information), and with --set L, <target>_set (the "
    "conformal set: the classes of probability at least 1 - q, q from the held-out scores, and the most probable "
    "one; else, or with --interval-method mixture, the most probable classes whose probabilities add up to at "
    "least L), most probable first, joined by '|'; a class holding '|', a double quote or a line break is quoted "
    "as in CSV: the cell is one record with the delimiter '|')."
)


class CLIError(AutoDEUQError):
    """A user-facing error: printed as one line, exit status 2."""


# Parameters of the library's functions set by a command-line option that is not an option of a run
# (those set by an option of a run are found in the table: autodeuq.app.options.option_of).
PARAMETER_FLAGS = {"manifest": "--out", "level": "--interval"}
#: The command line's options that are not options of a run (:data:`autodeuq.app.options.OPTIONS`):
#: what they give, and how the estimator receives the same.
INPUTS = {
    "--data": "fit(X, y): the training table",
    "--target": "fit(X, y): the target column(s) are y",
    "--valid": "fit(X, y, X_valid, y_valid)",
    "--test": "score the ensemble on test rows: predict(X_test) and autodeuq.metrics.evaluate",
    "--dataset": "fit(X, y) with the built-in dataset's arrays (autodeuq.table.data.load_builtin)",
    "--out": "ensemble_.save(path)",
}


def option(parameter: str) -> str:
    """The command-line option that sets a library parameter."""
    known = option_of(parameter)
    if known is not None:
        return known.cli_flag
    return PARAMETER_FLAGS.get(parameter, "--" + parameter.replace("_", "-"))


def error_line(exc: AutoDEUQError) -> str:
    """``exc`` as one line in command-line terms: a parameter is named by its option, and the
    options that can fix the problem are appended as a hint."""
    if isinstance(exc, ParameterError):
        value = f"{exc.value:g}" if isinstance(exc.value, float) else repr(exc.value)
        return f"{option(exc.parameter)} {exc.describe(option)}, got {value}"
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    hints = [option(p) for p in exc.parameters if option(p) not in line]
    return f"{line} ({', '.join(hints)})" if hints else line


# ----------------------------------------------------------------------------- parsers
class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line, as autodeuq's own errors are: the
    problem and where the options are described (argparse prints the whole usage first)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


class _Once(argparse.Action):
    """Store an option's value, refusing a second one (argparse would keep the last silently)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} is given more than once; give it once")
        setattr(namespace, self.dest, values)


GROUP_TITLES = {
    "table": "table columns (--data only, but --valid-fraction; fitted on the training rows, saved with every model)",
    "search": "search", "evaluation": "evaluation", "ensemble": "ensemble",
}


def _add_data_args(p):
    g = p.add_argument_group("data (give --data or --dataset)")
    g.add_argument("--data", metavar="FILE", help="training table: .csv, .parquet or .npz (arrays X, y)")
    g.add_argument("--target", metavar="COL", action="append",
                   help="target column; repeat for several targets (default: the column 'y')")
    g.add_argument("--valid", metavar="FILE", help="separate validation table (default: a random split)")
    g.add_argument("--test", metavar="FILE", help="test table, scored after the ensemble is built")
    g.add_argument("--dataset", choices=BUILTIN_DATASETS,
                   help="built-in dataset instead of --data (boston/concrete need the 'benchmarks' extra)")


def _add_ensemble_args(p, with_test=True):
    g = add_to_parser(p, ["ensemble"], GROUP_TITLES)["ensemble"]
    g.add_argument("--out", default=None, metavar="FILE",
                   help="ensemble manifest; metrics.json and the figures are written beside it "
                        "(default: DIR/ensemble.json)")
    if with_test:
        g.add_argument("--test", metavar="FILE", help="test table to score (built-in datasets use their own test set)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="autodeuq",
        description="Automated deep ensembles with uncertainty quantification.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("search", help="search architectures and training hyperparameters, filling a catalog")
    _add_data_args(p)
    add_to_parser(p, ["table", "search", "evaluation"], GROUP_TITLES)
    p = sub.add_parser("ensemble", help="select an ensemble from a catalog, score it, plot it")
    add_option(p, BY_NAME["run_dir"], required=True, help="catalog directory written by 'search'")
    _add_ensemble_args(p)
    p = sub.add_parser("predict", help="predict with a saved ensemble",
                       description="Predict with a saved ensemble. " + PREDICT_COLUMNS)
    p.add_argument("--ensemble", required=True, action=_Once, metavar="FILE",
                   help="ensemble manifest (ensemble.json), or an ONNX export (FILE.onnx: runs on ONNX Runtime, "
                        "without TensorFlow)")
    p.add_argument("--data", required=True, action=_Once, metavar="FILE", help="table with the model's feature columns")
    p.add_argument("--out", required=True, action=_Once, metavar="FILE.csv", help="where to write the predictions")
    p.add_argument("--interval", type=float, action="append", metavar="LEVEL",
                   help="also write the LEVEL prediction interval, e.g. 0.9: columns <target>_lower_90 and "
                        "<target>_upper_90 (see --interval-method); repeat for several levels (default: none)")
    p.add_argument("--set", type=float, metavar="LEVEL", default=None, dest="set_level", action=_Once,
                   help="a classifier's prediction set of level LEVEL, e.g. 0.9: also write <target>_set (see "
                        "--interval-method; default: none)")
    p.add_argument("--interval-method", choices=["auto", "conformal", "mixture"], default=None, action=_Once,
                   help="how --interval and --set are made: conformal: from the held-out conformity scores the "
                        "ensemble keeps (coverage >= LEVEL on rows like the validation rows; infinite, with a "
                        "warning, when LEVEL needs more held-out rows than there were); mixture: the central "
                        "interval of the ensemble's Gaussian mixture, or the most probable classes whose "
                        "probabilities reach LEVEL together; auto (default): conformal where the ensemble has the "
                        "scores (an ensemble saved by an older autodeuq has none), else mixture")
    p.add_argument("--engine", choices=["auto", "tensorflow", "onnx"], default="auto",
                   help="what predicts: onnx: ONNX Runtime, on the ensemble's ONNX conversion cached beside its "
                        "catalog (DIR/onnx/), made the first time; auto: ONNX Runtime for an .onnx file or when that "
                        "conversion exists, TensorFlow otherwise; tensorflow: TensorFlow (the reference)")
    p.add_argument("--id-column", metavar="COL", default=None, action=_Once,
                   help="a column of --data to copy, first, into the predictions (default: the --id-column the "
                        "model was fitted with, when the table has it)")
    p = sub.add_parser("export", help="write a saved ensemble as a self-contained folder (no catalog needed)")
    p.add_argument("--ensemble", required=True, action=_Once, metavar="PATH",
                   help="ensemble manifest (ensemble.json), or a folder exported before")
    p.add_argument("--out", required=True, action=_Once, metavar="DIR",
                   help="folder to write (new, empty, or an earlier export): ensemble.json and members/<id>.keras; "
                        "with --format onnx, a file FILE.onnx")
    p.add_argument("--format", choices=["keras", "onnx"], default="keras",
                   help="keras: a folder of the members' .keras files (predicts with TensorFlow); onnx: one .onnx "
                        "file holding the table's encoding, every member and the mixture, for ONNX Runtime "
                        "(predict reads it without TensorFlow; any ONNX Runtime binding can run it)")
    p = sub.add_parser("run", help="search, then build and score the ensemble (the whole job)")
    _add_data_args(p)
    add_to_parser(p, ["table", "search", "evaluation"], GROUP_TITLES)
    _add_ensemble_args(p, with_test=False)
    p = sub.add_parser("catalog", aliases=["show"], help="the best networks of a run: validation NLL, epochs, time, "
                       "architecture in words")
    p.add_argument("--run-dir", required=True, metavar="DIR", help="catalog directory written by 'search'")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="how many of the best trained networks to list; 0 lists all (default: 10)")
    return parser


# ----------------------------------------------------------------------------- commands
def _configs(args, *configs):
    """The configurations ``configs`` (classes of :mod:`autodeuq.app.options`) of the options given
    to this command, every value checked before any work. The built-in toy dataset's space is
    the toy space unless ``--space`` says otherwise."""
    from autodeuq.app.options import given, resolve

    groups = {group for c in configs for group in c.GROUPS}
    values = {name: value for name, value in given(args).items() if BY_NAME[name].group in groups}
    if getattr(args, "dataset", None) == "toy-sine" and any("space" in c.__dataclass_fields__ for c in configs):
        values.setdefault("space", "toy")
    return resolve(values, configs)


def _load_dataset(args, table, seed):
    from autodeuq.app.options import flag, given
    from autodeuq.table.data import load_builtin, load_files

    if args.dataset and args.data:
        raise CLIError("give either --data FILE or --dataset NAME, not both")
    chosen = given(args)
    if args.valid and "valid_fraction" in chosen:
        raise CLIError("give either --valid FILE or --valid-fraction F, not both: the validation rows are --valid's")
    table_flags = [flag(name) for name in chosen if BY_NAME[name].group == "table" and name != "valid_fraction"]
    if args.dataset:
        if table_flags:
            raise CLIError(f"{table_flags[0]} applies to --data tables, not to the built-in --dataset")
        test_fraction = None if args.dataset in ("toy-sine", "moons") else 0.1
        return load_builtin(args.dataset, seed=seed, valid_fraction=table.valid_fraction, test_fraction=test_fraction)
    if not args.data:
        raise CLIError("no data: give --data FILE (with --target COL) or --dataset NAME")
    from autodeuq.table.preprocess import TableOptions

    dataset = load_files(args.data, args.target, valid=args.valid, test=args.test,
                         valid_fraction=table.valid_fraction, seed=seed, options=TableOptions.of(table),
                         task=table.task, class_weight=table.class_weight, label_smoothing=table.label_smoothing)
    for source, n in dataset.dropped_missing_target.items():
        print(f"autodeuq: {source}: left out {n} row(s) whose target is missing (--drop-missing-target)", flush=True)
    return dataset


def _check_targets(args):
    repeated = sorted({t for t in args.target or [] if args.target.count(t) > 1})
    if repeated:
        raise CLIError(f"--target {repeated[0]} is given more than once; name each target column once")


def cmd_search(args, *, timeout=None, configs=None):
    """``autodeuq search``; ``timeout``: the search's wall-clock limit when not ``--timeout``;
    ``configs``: the (table, search) configurations when ``run`` checked them already."""
    from autodeuq.app.options import SearchConfig, TableConfig
    from autodeuq.app.pipeline import fill_catalog
    from autodeuq.search.space import load_space

    table, config = configs or _configs(args, TableConfig, SearchConfig)
    _check_targets(args)
    _check_run_dir(config.run_dir)
    dataset = _load_dataset(args, table, config.seed or 0)
    space = load_space(config.space).for_rows(len(dataset.x_train))
    run_dir = Path(config.run_dir or f"runs/{Path(dataset.name).stem}-{config.search}")

    def announce(evaluator):
        classes = f", {dataset.labels.n_classes} classes" if dataset.is_classification else ""
        print(f"autodeuq: {dataset.name}: task {dataset.task} ({dataset.task_reason}); "
              f"{len(dataset.x_train)} train / {len(dataset.x_valid)} validation rows, "
              f"{dataset.n_features} feature(s), target(s) {dataset.target_names}{classes}; space {space.name} "
              f"({space.describe_sizes()}); "
              f"search {config.search}; {evaluator.n_slots} parallel evaluation(s); catalog {run_dir}", flush=True)

    try:
        summary = fill_catalog(space, dataset, run_dir, config, timeout=timeout or config.timeout, on_start=announce,
                               log=lambda line: print(line, flush=True))
    except OSError as exc:  # the run directory cannot be written, say
        raise _os_error(exc) from None
    print(f"search: {summary}", flush=True)
    if summary.interrupted:
        print(f"interrupted: the catalog is consistent; run the same command again to resume {run_dir}")
        raise SystemExit(143 if summary.stopped_by == "terminated" else 130)
    summary.raise_for_error()
    return run_dir


def _check_out(path: Path, flag: str, inputs=(), beside=()) -> None:
    """Refuse, before any work, an output file that cannot or must not be written.

    ``path`` (given as ``flag``) must not be a folder, nor an existing device, FIFO or socket
    (the write would replace it), nor the same file as one of ``inputs`` (``(flag, path)`` of
    the files the command reads: same path or, through links, same file); the nearest folder
    that exists on its way must let a file be created. ``beside``: names of the files written
    next to it (``metrics.json``), checked alike.
    """
    from autodeuq.core.fileio import refuse_special, same_file

    if path.is_dir():
        raise CLIError(f"{flag} {path}: is a directory; give a file name")
    for target in (path, *(path.parent / name for name in beside)):
        try:
            refuse_special(target)
        except OSError as exc:
            where = "" if target == path else f" (writes {target.name} beside it): {target}"
            raise CLIError(f"{flag} {path}{where}: {exc.strerror}") from None
        for input_flag, given in inputs:
            if given is not None and same_file(target, given):
                raise CLIError(f"{flag} {path}: is the same file as {input_flag} {given}; writing it would replace "
                               f"the input: give another output path")
    _check_writable_folder(_nearest_folder(path, flag), f"{flag} {path}")


def _nearest_folder(path: Path, flag: str) -> Path:
    """The nearest existing folder on the way to ``path`` (where its missing folders will be made)."""
    folder = next(parent for parent in path.parents if parent.exists() or parent == Path(parent.anchor or "."))
    if not folder.is_dir():
        raise CLIError(f"{flag} {path}: {folder} is not a directory")
    return folder


def _check_run_dir(run_dir: str | None) -> None:
    """Refuse, before any work, a ``--run-dir`` that is not a folder or lies where no folder can
    be made (``None``: the default under ``runs/``)."""
    path = Path(run_dir or "runs")
    if path.exists():
        if path.is_dir():  # anything else: the catalog's own message, which says what to do
            _check_writable_folder(path, f"--run-dir {path}")
        return
    _check_writable_folder(_nearest_folder(path, "--run-dir"), f"--run-dir {path}")


def _inputs(args) -> list[tuple[str, str | None]]:
    """(flag, path) of the table files a command reads."""
    return [(flag, getattr(args, flag[2:], None)) for flag in ("--data", "--valid", "--test")]


def _say_foreign_catalog(manifest: Path, ensemble) -> None:
    """One line when a manifest lying in a run directory predicts with another run directory's
    catalog (a manifest copied or edited by hand, say): the networks are not that folder's."""
    from autodeuq.catalog.schema import DB_NAME

    run_dir = getattr(ensemble, "run_dir", None)
    folder = manifest.parent.resolve()
    if run_dir is not None and (folder / DB_NAME).exists() and Path(run_dir).resolve() != folder:
        print(f"autodeuq: note: {manifest} predicts with the networks of the catalog in {run_dir}, not with the "
              f"catalog beside it", file=sys.stderr)


def _check_writable_folder(folder: Path, what: str) -> None:
    """Refuse, before any work, a folder where no file can be made (:func:`autodeuq.core.fileio.probe_folder`)."""
    from autodeuq.core.fileio import os_reason, probe_folder

    try:
        probe_folder(folder)
    except OSError as exc:
        raise CLIError(f"{what}: cannot create a file in {folder}: {os_reason(exc)}") from None


def _os_error(exc: OSError) -> CLIError:
    where = f"{exc.filename}: " if exc.filename else ""
    return CLIError(f"{where}{exc.strerror or exc}")


def cmd_ensemble(args, run_dir=None, deadline=None, config=None, search=None):
    """``autodeuq ensemble``; ``deadline``: the :func:`time.monotonic` time by which a run must end;
    ``config``: the ensemble configuration when ``run`` checked it already; ``search``: the
    search configuration of ``run``, whose workers refit the members."""
    from autodeuq.app.options import EnsembleConfig
    from autodeuq.app.pipeline import refit_where
    from autodeuq.report import METRICS_NAME, build_and_report

    config = config or _configs(args, EnsembleConfig)[0]
    run_dir = Path(run_dir or args.run_dir)
    out = Path(args.out) if args.out else run_dir / "ensemble.json"
    _check_out(out, "--out", inputs=_inputs(args), beside=(METRICS_NAME,))
    with warnings.catch_warnings(record=True) as caught:  # shown after the report's lines
        try:
            report = build_and_report(run_dir, config, test_file=getattr(args, "test", None), manifest=out,
                                      deadline=deadline, refit_where=refit_where(search),
                                      seed=0 if search is None else search.seed)
        except OSError as exc:  # FileNotFoundError of a --test file included
            raise _os_error(exc) from None
    for warning in caught:
        warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    print(report.table())
    print(report.refit)
    if report.ensemble.calibration is not None:
        why = (report.ensemble.selection or {}).get("calibration", "recalibrated")
        if report.ensemble.scale is None:
            print(f"{why}; members' logits / temperature {factor_text(report.ensemble.temperature)}")
        else:
            scale = ", ".join(factor_text(c) for c in report.ensemble.scale)
            print(f"{why}; predictive std x {scale} (per target)")
    conformal = (report.ensemble.selection or {}).get("conformal")
    if conformal:  # which held-out rows the intervals' (or sets') conformal scores come from
        print(f"conformal {get_task(report.ensemble.task).conformal_gives}: {conformal}")
    print(f"ensemble: {report.ensemble}")
    print(f"wrote {out}, {out.parent / 'metrics.json'}")
    for plot in report.plots:
        print(f"wrote {plot}")


def factor_text(value: float) -> str:
    """A recalibration factor to 3 significant digits, trailing zeros kept: 0.99975 is "1.00", not "1"
    (which reads as "left unchanged")."""
    return format(float(value), "#.3g")


def _interval_levels(levels) -> list[tuple[float, str]]:
    """(level, column suffix) of each ``--interval``, refused unless a probability in (0, 1 - 1e-9]
    (:func:`autodeuq.ensemble.mixture.interval_levels`): checked before the ensemble loads."""
    from autodeuq.ensemble.mixture import interval_levels

    return interval_levels(levels)


def _split_id_column(table, ensemble, id_column, source):
    """(the id column to copy or None, the table to predict from).

    ``id_column`` (``--id-column``) must be in the table; without it, the model's recorded id
    column is copied when the table has it. An id column that is not a feature is left out of
    the table the ensemble reads.
    """
    columns = [str(c) for c in table.columns]
    if id_column is not None and id_column not in columns:
        raise CLIError(f"--id-column {id_column}: {source} has no such column; columns are {columns}")
    if id_column is None and ensemble.preprocessor is not None:
        id_column = ensemble.preprocessor.options.id_column
    if id_column is None or id_column not in columns:
        return None, table
    ids = table[table.columns[columns.index(id_column)]].rename(id_column)
    if id_column in ensemble.columns:
        return ids, table
    return ids, table.drop(columns=[table.columns[columns.index(id_column)]])


def _interval_method(args, ensemble) -> str:
    """What ``--interval-method`` asks of ``ensemble`` (default ``auto``), refused when it asks for
    conformal scores the ensemble does not hold."""
    method = args.interval_method or "auto"
    if method == "conformal" and ensemble.conformal is None:
        raise CLIError(f"--interval-method conformal: {args.ensemble} holds no conformal scores (an ensemble of "
                       f"an older autodeuq, or of fewer than 2 validation rows); use --interval-method mixture, or "
                       f"rebuild it with 'autodeuq ensemble'")
    return method


def cmd_predict(args):
    import pandas as pd

    from autodeuq.core.fileio import atomic_write
    from autodeuq.ensemble import load_ensemble
    from autodeuq.table.data import read_table

    if Path(args.ensemble).is_dir() and not (Path(args.ensemble) / "ensemble.json").is_file():
        raise CLIError(f"--ensemble {args.ensemble}: is a directory without ensemble.json; give the manifest file "
                       f"or an exported ensemble folder")
    levels = _interval_levels(args.interval)
    if args.set_level is not None:
        from autodeuq.metrics import check_level

        try:
            check_level(args.set_level)
        except ParameterError as exc:
            raise CLIError(f"--set {exc.requirement}, got {args.set_level}") from None
    out = Path(args.out)
    manifest = Path(args.ensemble) / "ensemble.json" if Path(args.ensemble).is_dir() else Path(args.ensemble)
    _check_out(out, "--out", inputs=[*_inputs(args), ("--ensemble", manifest)])
    try:
        ensemble = load_ensemble(args.ensemble, engine=args.engine)
        _say_foreign_catalog(manifest, ensemble)
        classifier = getattr(ensemble, "labels", None) is not None
        if classifier and levels:
            raise CLIError("--interval: a classifier has no intervals; its prediction sets are --set LEVEL")
        if not classifier and args.set_level is not None:
            raise CLIError("--set: prediction sets are a classifier's; a regression ensemble has --interval LEVEL")
        method = _interval_method(args, ensemble)
        # Columns are matched by name; target columns, when present, are ignored.
        x = read_table(args.data, targets=False)
        if Path(args.data).suffix.lower() == ".npz" and x.shape[1] == len(ensemble.columns):
            x.columns = ensemble.columns  # an array's columns are the model's features, in order
        ids, features = _split_id_column(x, ensemble, args.id_column, str(args.data))
        # The mixture once, for the moments and the intervals alike.
        # Rows with unseen categories: an UnseenCategoryWarning, one line on stderr like every AutoDEUQWarning.
        prediction = ensemble.predict(features, source=str(args.data))
    except OSError as exc:
        raise _os_error(exc) from None
    if classifier:
        frame = prediction.to_frame(ensemble.target_names[0], set_level=args.set_level, method=method)
    else:
        frame = prediction.to_frame(ensemble.target_names, levels=[level for level, _ in levels],
                                    method=method)
    columns = {} if ids is None else {ids.name: ids.to_numpy()}  # an id column goes first
    columns.update((name, frame[name].to_numpy()) for name in frame.columns)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"--out {out}: cannot create its folder: {exc.strerror or exc}") from None
    atomic_write(out, pd.DataFrame(columns).to_csv(index=False).encode())
    # What the columns hold is in `predict --help` and the documentation's predict-CSV page.
    kind = "" if classifier else "all standard deviations, "
    print(f"wrote {len(x)} predictions to {out}: columns {', '.join(columns)} "
          f"({kind}explained in `autodeuq predict --help`)")


def _leaderboard(frame, nll_column: str) -> list[str]:
    """Aligned text rows (header first) of the entries of ``frame``, the architecture last."""
    def number(value, fmt):
        return "-" if value is None or value != value else format(value, fmt)

    rows = [["rank", "id", nll_column, "status", "parent", "epochs", "best_epoch", "time_s", "params", "optimizer",
             "lr", "batch", "architecture"]]
    for rank, (_, e) in enumerate(frame.iterrows(), start=1):
        rows.append([str(rank), str(e["id"]), number(e[nll_column], ".4f"), str(e["status"]),
                     number(e["parent"], ".0f"), number(e["epochs"], ".0f"), number(e["best_epoch"], ".0f"),
                     number(e["wall_time"], ".1f"),
                     number(e["n_params"], ".0f"), str(e["optimizer"]), number(e["learning_rate"], ".2e"),
                     number(e["batch_size"], ".0f"), str(e["architecture"])])
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]) - 1)]
    left = {"status", "optimizer"}
    return ["  ".join([(cell.ljust(w) if name in left else cell.rjust(w))
                       for cell, w, name in zip(row, widths, rows[0])] + [row[-1]]) for row in rows]


def cmd_catalog(args):
    from autodeuq.catalog import CSV_NAME, Catalog
    from autodeuq.core.result import MODEL_STATUSES, Status

    if args.top < 0:
        raise CLIError(f"--top must be >= 0 (0 lists every trained network), got {args.top}")
    run_dir = Path(args.run_dir)
    with Catalog(run_dir) as catalog:
        frame = catalog.to_dataframe()
        data = catalog.meta.get("data", {})
        space = catalog.space.name
        original = math.isfinite(catalog.nll_offset)
    counts = frame["status"].value_counts()
    parts = [f"{counts.get(Status.DONE, 0)} done"]
    if counts.get(Status.DISCARDED, 0):
        parts.append(f"{counts[Status.DISCARDED]} discarded early")
    parts.append(f"{counts.get(Status.FAILED, 0)} failed")
    if counts.get(Status.RUNNING, 0):
        parts.append(f"{counts[Status.RUNNING]} running or interrupted")
    print(f"{run_dir}: {len(frame)} evaluations: {', '.join(parts)}; dataset {data.get('name')} "
          f"(target(s) {', '.join(map(str, data.get('targets', [])))}); space {space}")
    # The NLL users compare with metrics.json: in the data's units, unless the catalog lacks their scale.
    nll_column = "valid_nll" if original else "objective"
    if data.get("task") == "classification":  # the objective is the log loss, whatever the scale
        frame = frame.rename(columns={"valid_nll": "valid_log_loss"})
        nll_column = "valid_log_loss"
    models = frame[frame["status"].isin(MODEL_STATUSES)].sort_values([nll_column, "id"], na_position="last")
    if models.empty:
        print("no trained network yet")
    else:
        shown = models if args.top == 0 else models.head(args.top)
        scale = ("in the data's original units, as metrics.json reports it" if original
                 else "in standardized units (the catalog does not record the targets' scale)")
        measure = "log loss" if nll_column == "valid_log_loss" else "NLL"
        print(f"best {len(shown)} of {len(models)} trained networks by validation {measure} ({nll_column}, lower is "
              f"better), {scale}; parent: the entry aging evolution mutated into this one (-: drawn otherwise); "
              f"time_s: training seconds; architecture: cells in order, "
              f"'+skip(...)' adds the outputs of earlier cells (input: the features)")
        print()
        print("\n".join(_leaderboard(shown, nll_column)))
        if len(shown) < len(models):
            print(f"... {len(models) - len(shown)} more: --top 0 lists them all")
    print(f"every evaluation, failures with their reason: {run_dir / CSV_NAME}")


def cmd_export(args):
    from autodeuq.ensemble import load_ensemble

    try:
        ensemble = load_ensemble(args.ensemble, engine="tensorflow")  # the members' own files
        if args.format == "onnx":
            path = ensemble.save(args.out, format="onnx")
            print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, {len(ensemble.member_ids)} member(s)): "
                  f"predict with --ensemble {path}, or with ONNX Runtime alone")
            return
        manifest = ensemble.save(args.out, self_contained=True)
    except OSError as exc:
        raise _os_error(exc) from None
    files = [manifest, *(manifest.parent / "members" / f"{i}.keras" for i in ensemble.member_ids)]
    size = sum(f.stat().st_size for f in files)
    print(f"wrote {manifest} and {len(ensemble.member_ids)} member model(s) to {manifest.parent} "
          f"({size / 1e6:.2f} MB); predict with --ensemble {manifest}")


def cmd_run(args):
    from autodeuq.app.options import EnsembleConfig, SearchConfig, TableConfig
    from autodeuq.app.pipeline import ensemble_deadline, search_timeout

    started = time.monotonic()
    table, search, ensemble = _configs(args, TableConfig, SearchConfig, EnsembleConfig)  # all before the search
    # Every output location before any work: the run directory, the manifest and metrics.json.
    _check_run_dir(search.run_dir)
    if args.out:
        from autodeuq.report import METRICS_NAME

        _check_out(Path(args.out), "--out", inputs=_inputs(args), beside=(METRICS_NAME,))
    # --timeout bounds the whole run: the search stops early enough for the ensemble step, whose
    # refit retrains only the members that fit in what is left.
    run_dir = cmd_search(args, timeout=search_timeout(search.timeout), configs=(table, search))
    cmd_ensemble(args, run_dir=run_dir, deadline=ensemble_deadline(started, search.timeout), config=ensemble,
                 search=search)


def _show_warning(message, category, filename, lineno, file=None, line=None, _default=warnings.showwarning):
    """autodeuq's own warnings as one line on stderr; any other as Python shows it."""
    if issubclass(category, AutoDEUQWarning):
        text = message.line(option) if isinstance(message, ParameterWarning) else message  # options as flags
        print(f"autodeuq: warning: {text}", file=sys.stderr)
    else:
        _default(message, category, filename, lineno, file, line)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {"search": cmd_search, "ensemble": cmd_ensemble, "predict": cmd_predict, "run": cmd_run,
                "catalog": cmd_catalog, "show": cmd_catalog, "export": cmd_export}
    signals = contextlib.nullcontext()
    if args.command in ("search", "run"):
        from autodeuq.engine.runner import sigterm_interrupts

        signals = sigterm_interrupts()  # SIGTERM stops like Ctrl-C, exit status 143
    sigterm = None
    try:
        with signals as sigterm, warnings.catch_warnings():
            warnings.showwarning = _show_warning
            warnings.simplefilter("always", AutoDEUQWarning)  # each, not the first of a kind per place
            handlers[args.command](args)
    except AutoDEUQError as exc:
        from autodeuq.engine.runner import SearchError

        print(f"autodeuq: error: {error_line(exc)}", file=sys.stderr)
        return EXIT_SEARCH_FAILED if isinstance(exc, SearchError) else EXIT_USAGE
    except KeyboardInterrupt as exc:
        print("autodeuq: interrupted", file=sys.stderr)
        return 143 if getattr(sigterm, "received", False) else getattr(exc, "exit_status", 130)
    except SystemExit as exc:
        return int(exc.code or 0)
    except Exception:  # not one of autodeuq's errors: a bug, whose traceback helps fix it
        traceback.print_exc()
        print("autodeuq: internal error: this is a bug in autodeuq; please report it with the traceback above",
              file=sys.stderr)
        return EXIT_INTERNAL
    return 0


if __name__ == "__main__":
    sys.exit(main())
