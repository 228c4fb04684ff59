"""Command line: ``autodeuq search | ensemble | predict | run | catalog``.

Every error of autodeuq's (an :class:`~autodeuq.errors.AutoDEUQError`) is one line on stderr
(``autodeuq: error: ...``) and exit status 2, no traceback; parameters are named by their options.
A search that produced nothing usable (every evaluation failed, or its first ones all failed the
same way) exits 1 with the most common failure reason; Ctrl-C exits 130, SIGTERM 143, both
leaving the run resumable. Any other exception is a bug: its traceback, a line asking to report
it, exit status 1.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
import traceback
import warnings
from pathlib import Path

from autodeuq.data import BUILTIN_DATASETS, DEFAULT_VALID_FRACTION, SMALL_DATA_ROWS
from autodeuq.errors import AutoDEUQError, AutoDEUQWarning, ParameterError

EXIT_USAGE = 2
EXIT_INTERNAL = 1  # an unexpected exception (a bug), as for any Python program that dies of one
EXIT_SEARCH_FAILED = 1
PREDICT_COLUMNS = (
    "Columns, for each target, in the target's units: <target>_mean (predictive mean), <target>_std "
    "(total predictive standard deviation), <target>_aleatoric_std and <target>_epistemic_std (standard "
    "deviations of the two parts; their squares, the variances, add up: std^2 = aleatoric_std^2 + "
    "epistemic_std^2), and with --interval L, <target>_lower_<100 L> and <target>_upper_<100 L> (the central "
    "L interval, from the quantiles of the ensemble's Gaussian mixture). No column is a variance."
)


class CLIError(AutoDEUQError):
    """A user-facing error: printed as one line, exit status 2."""


# Options not named after the library parameter they set (the others are ``--`` + its name, dashed).
OPTIONS = {"size": "--size", "ensemble_size": "--size", "address": "--ray-address", "min_epochs": "--sha-min-epochs",
           "reduction": "--sha-reduction", "score": "--selection-score", "stop": "--selection-stop",
           "bags": "--selection-bags", "manifest": "--out", "level": "--interval"}


def _auto_or_int(text: str):
    """An option's value that is ``auto`` or an integer (checked later, with its parameter)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be auto or an integer, got {text!r}") from None


def option(parameter: str) -> str:
    """The command-line option that sets a library parameter."""
    return OPTIONS.get(parameter, "--" + parameter.replace("_", "-"))


def error_line(exc: AutoDEUQError) -> str:
    """``exc`` as one line in command-line terms: a parameter is named by its option, and the
    options that can fix the problem are appended as a hint."""
    if isinstance(exc, ParameterError):
        value = f"{exc.value:g}" if isinstance(exc.value, float) else repr(exc.value)
        return f"{option(exc.parameter)} {exc.requirement}, got {value}"
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


def _add_data_args(p):
    from autodeuq.preprocess import CATEGORICAL, IMPUTE

    g = p.add_argument_group("data (give --data or --dataset)")
    g.add_argument("--data", metavar="FILE", help="training table: .csv, .parquet or .npz (arrays X, y)")
    g.add_argument("--target", metavar="COL", action="append",
                   help="target column; repeat for several targets (default: the column 'y')")
    g.add_argument("--valid", metavar="FILE", help="separate validation table (default: a random split)")
    g.add_argument("--valid-fraction", metavar="F", type=float, default=None,
                   help="fraction of --data held out for validation when --valid is not given (default: 1/3)")
    g.add_argument("--test", metavar="FILE", help="test table, scored after the ensemble is built")
    g.add_argument("--dataset", choices=BUILTIN_DATASETS,
                   help="built-in dataset instead of --data (boston/concrete need the 'benchmarks' extra)")
    g = p.add_argument_group("table columns (--data only; fitted on the training rows, saved with every model)")
    g.add_argument("--categorical", choices=CATEGORICAL, default=None,
                   help="encoding of non-numeric columns: onehot (one 0/1 input per training category; an unseen "
                        "category is all zeros), ordinal (the category's index; unseen: -1), none (refuse them) "
                        "(default: onehot)")
    g.add_argument("--impute", choices=IMPUTE, default=None,
                   help="missing feature values: the training mean or median of a numeric column, the most frequent "
                        "training category of a categorical one, also at prediction; none refuses them "
                        "(default: mean)")
    g.add_argument("--drop", metavar="COL", action="append", default=None,
                   help="a column that is not a feature (ignored, also by predict); repeat for several")
    g.add_argument("--id-column", metavar="COL", default=None,
                   help="a row identifier: not a feature; 'autodeuq predict' copies it into its output")
    g.add_argument("--drop-missing-target", action="store_true", default=None,
                   help="leave out the rows whose target is missing (of --data and --valid), and say how many, "
                        "instead of refusing the table")


def _add_search_args(p):
    from autodeuq import discard, evaluator, search  # their name tables import none of what they name

    bo_searches = ", ".join(search.surrogate_searchers())

    g = p.add_argument_group("search")
    g.add_argument("--space", default=None, metavar="NAME_OR_FILE",
                   help="search space: 'toy', 'tabular' or a YAML/JSON file "
                        "(default: toy for --dataset toy-sine, else tabular)")
    g.add_argument("--search", default="agebo", choices=list(search.SEARCHERS) + list(search.ABLATIONS),
                   help="search algorithm (default: agebo); the ablations: age-fixed-hp (aging evolution over "
                        "the architecture, training hyperparameters fixed by --fixed-hp), bo-fixed-arch (BO over "
                        "the training hyperparameters, architecture fixed by --fixed-arch)")
    g.add_argument("--surrogate", default=None, choices=list(search.SURROGATES),
                   help=f"surrogate model of the BO-based searchers ({bo_searches}) (default: et)")
    g.add_argument("--acq", default=None, choices=list(search.ACQUISITIONS),
                   help=f"acquisition function of the BO-based searchers ({bo_searches}) (default: lcb)")
    g.add_argument("--fixed-hp", default=None, metavar="JSON",
                   help="with --search age-fixed-hp: training hyperparameters as a JSON object; those not given "
                        "keep their defaults (default: learning_rate 0.01, batch_size 16, optimizer adam, "
                        "patience_reduce_lr 10, patience_early_stopping 20)")
    g.add_argument("--fixed-arch", default=None, metavar="JSON",
                   help="with --search bo-fixed-arch: the architecture vector as a JSON list of integers, one per "
                        "architecture variable (default: every cell Dense with the units nearest 64 and tanh, "
                        "no skip connection)")
    g.add_argument("--max-evals", type=int, default=100, metavar="N",
                   help="evaluations to finish in the run directory, earlier sessions included (default: 100)")
    evolving = ", ".join(search.evolution_searchers())
    g.add_argument("--population-size", type=_auto_or_int, default="auto", metavar="P",
                   help=f"population of aging evolution ({evolving}): the last P successful evaluations, random "
                        "until there are P; auto: a fifth of --max-evals, from 10 to 100 (default: auto)")
    g.add_argument("--tournament-size", type=_auto_or_int, default="auto", metavar="S",
                   help=f"tournament of aging evolution ({evolving}): each child mutates the best of S members drawn "
                        "from the population, 1 <= S <= P; auto: a third of P, at least 2 (default: auto)")
    g.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="wall-clock limit in seconds, > 0: of the search (search), of the search and the ensemble "
                        "step (run: the search keeps a tenth of it, 30 s to 5 min, for the ensemble step); "
                        "no evaluation starts that would not finish in time (default: none)")
    g.add_argument("--eval-timeout", type=float, default=None, metavar="S",
                   help="per-evaluation limit in seconds (> 0) of running on a worker; overrunning evaluations are "
                        "cancelled and recorded as failures (default: none)")
    g.add_argument("--eval-budget", type=float, default=None, metavar="S",
                   help="seconds (> 0) each training may take: it ends after the epoch when another one as long "
                        "would pass them, keeping its best epoch so far, like an early stop (default: none)")
    g.add_argument("--epochs", type=int, default=None, metavar="E",
                   help="override the space's epoch budget (default: the space's)")
    g.add_argument("--early-discarding", choices=discard.POLICIES, default="auto",
                   help=f"auto: sha above {SMALL_DATA_ROWS} training + validation rows, else none (a "
                        "resumed run keeps its catalog's policy). none: every configuration trains to its own "
                        "early stop. sha: asynchronous successive halving; a training continues past each rung epoch "
                        "(min x reduction^k) only if its validation loss is among the best 1/reduction recorded "
                        "there. iepoch: every evaluation of the search trains --iepoch-epochs epochs, then the "
                        "--iepoch-top-k best configurations are trained to the full budget (default: auto)")
    g.add_argument("--sha-min-epochs", type=_auto_or_int, default="auto", metavar="E",
                   help=f"first rung of --early-discarding sha; auto: 3 up to {SMALL_DATA_ROWS} training + validation "
                        "rows, else 1 (a resumed run keeps its catalog's) (default: auto)")
    g.add_argument("--sha-reduction", type=int, default=3, metavar="R",
                   help="reduction factor of --early-discarding sha, >= 2 (default: 3)")
    g.add_argument("--sha-rungs", choices=discard.RUNG_UNITS, default="auto",
                   help="what the rungs of --early-discarding sha count: epochs, or steps (the optimizer steps of "
                        "as many epochs with the space's middle batch size (geometric mean), so larger batches are "
                        "judged after more epochs, smaller ones after fewer); auto: epochs (a resumed run keeps "
                        "its catalog's) (default: auto)")
    g.add_argument("--iepoch-epochs", type=int, default=1, metavar="I",
                   help="epochs of each search evaluation under --early-discarding iepoch, >= 1 and below the "
                        "epoch budget (default: 1)")
    g.add_argument("--iepoch-top-k", type=int, default=10, metavar="K",
                   help="configurations trained to the full budget after the search under --early-discarding "
                        "iepoch, >= 1 (default: 10)")
    g.add_argument("--seed", type=int, default=0,
                   help="seed, an integer from 0 to 2**32 - 1, of the split, the searcher and the trainings "
                        "(default: 0)")
    g.add_argument("--run-dir", default=None, metavar="DIR",
                   help="catalog directory; an existing one is resumed (default: runs/<dataset>-<search>)")
    g.add_argument("--new-run", action="store_true", help="refuse to resume: DIR must not hold a catalog yet")
    e = p.add_argument_group("evaluation")
    e.add_argument("--evaluator", choices=list(evaluator.EVALUATORS), default="ray",
                   help="ray: parallel Ray tasks (default); serial: in-process, one at a time")
    e.add_argument("--workers", type=int, default=None, metavar="N",
                   help="concurrent evaluations (default: what the Ray cluster can run)")
    e.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="join an existing Ray cluster ('auto' or host:port); default: the RAY_ADDRESS environment "
                        "variable when set, else start a new local instance")
    e.add_argument("--cpus-per-eval", type=float, default=None, metavar="C",
                   help="CPUs per evaluation, > 0; TensorFlow uses that many threads (default: 1)")
    e.add_argument("--gpus-per-eval", type=float, default=None, metavar="G",
                   help="GPUs per evaluation (default: 1 when the cluster has GPUs, else 0)")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_ensemble_args(p, with_test=True):
    from autodeuq.ensemble import options

    g = p.add_argument_group("ensemble")
    g.add_argument("--size", type=int, default=5, metavar="K", help="distinct ensemble members (default: 5)")
    g.add_argument("--selector", choices=options.METHODS, default="greedy",
                   help="selection method (default: greedy, with replacement)")
    g.add_argument("--selection-score", choices=options.SCORES, default="mixture",
                   help="what selection minimizes: the ensemble's exact mixture NLL or its moment-matched Gaussian "
                        "NLL (default: mixture)")
    g.add_argument("--selection-stop", choices=options.STOPS, default="size",
                   help="size: always K distinct members (when the catalog has K usable models); improvement: "
                        "stop as soon as no addition improves the validation NLL (may leave one member) "
                        "(default: size)")
    g.add_argument("--diversity", choices=options.DIVERSITY, default="none",
                   help="at most one member per architecture, or per set of activation functions (default: none)")
    g.add_argument("--selection-bags", type=int, default=0, metavar="B",
                   help="repeat the selection on B random halves of the validation rows and average the weights "
                        "(bagged selection; 0: select once on all rows) (default: 0)")
    g.add_argument("--calibrate", choices=options.CALIBRATIONS, default="auto",
                   help="scale: recalibrate each target's predictive std by a factor fitted on out-of-fold "
                        "selections of the validation rows; auto: scale when the training and validation rows "
                        f"number more than {SMALL_DATA_ROWS}, where it was measured to lower the test NLL "
                        "(default: auto)")
    g.add_argument("--refit", action=argparse.BooleanOptionalAction, default="auto",
                   help="retrain the selected members on the training and validation rows together, each for the "
                        "epochs of its best validation loss with the learning rates it used then (their networks "
                        "are written beside the --out manifest, DIR/ensemble_refit/<id>.keras by default); "
                        "--no-refit: keep the networks the search trained. run retrains them at once on its "
                        "search's Ray workers, ensemble one after the other. Under run's --timeout, a member is "
                        "refitted only if its retraining fits in the time left (default: when the training and "
                        f"validation rows number at most {SMALL_DATA_ROWS}, where it was measured to lower the "
                        "test NLL)")
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
    _add_search_args(p)
    p = sub.add_parser("ensemble", help="select an ensemble from a catalog, score it, plot it")
    p.add_argument("--run-dir", required=True, metavar="DIR", help="catalog directory written by 'search'")
    _add_ensemble_args(p)
    p = sub.add_parser("predict", help="predict with a saved ensemble",
                       description="Predict with a saved ensemble. " + PREDICT_COLUMNS)
    p.add_argument("--ensemble", required=True, metavar="FILE", help="ensemble manifest (ensemble.json)")
    p.add_argument("--data", required=True, metavar="FILE", help="table with the model's feature columns")
    p.add_argument("--out", required=True, metavar="FILE.csv", help="where to write the predictions")
    p.add_argument("--interval", type=float, action="append", metavar="LEVEL",
                   help="also write the central LEVEL prediction interval of the ensemble's mixture, e.g. 0.9: "
                        "columns <target>_lower_90 and <target>_upper_90; repeat for several levels (default: none)")
    p.add_argument("--id-column", metavar="COL", default=None,
                   help="a column of --data to copy, first, into the predictions (default: the --id-column the "
                        "model was fitted with, when the table has it)")
    p = sub.add_parser("export", help="write a saved ensemble as a self-contained folder (no catalog needed)")
    p.add_argument("--ensemble", required=True, metavar="PATH",
                   help="ensemble manifest (ensemble.json), or a folder exported before")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder to write (new, empty, or an earlier export): ensemble.json and members/<id>.keras")
    p = sub.add_parser("run", help="search, then build and score the ensemble (the whole job)")
    _add_data_args(p)
    _add_search_args(p)
    _add_ensemble_args(p, with_test=False)
    p = sub.add_parser("catalog", aliases=["show"], help="the best networks of a run: validation NLL, epochs, time, "
                       "architecture in words")
    p.add_argument("--run-dir", required=True, metavar="DIR", help="catalog directory written by 'search'")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="how many of the best trained networks to list; 0 lists all (default: 10)")
    return parser


# ----------------------------------------------------------------------------- commands
def _valid_fraction(args) -> float:
    """``--valid-fraction``, or its default when not given (None tells whether it was)."""
    return DEFAULT_VALID_FRACTION if args.valid_fraction is None else args.valid_fraction


def _load_dataset(args):
    from autodeuq.data import load_builtin, load_files

    if args.dataset and args.data:
        raise CLIError("give either --data FILE or --dataset NAME, not both")
    if args.valid and args.valid_fraction is not None:
        raise CLIError("give either --valid FILE or --valid-fraction F, not both: the validation rows are --valid's")
    valid_fraction = _valid_fraction(args)
    table_flags = [flag for flag, value in (("--categorical", args.categorical), ("--impute", args.impute),
                                            ("--drop", args.drop), ("--id-column", args.id_column),
                                            ("--drop-missing-target", args.drop_missing_target))
                   if value is not None]
    if args.dataset:
        if table_flags:
            raise CLIError(f"{table_flags[0]} applies to --data tables, not to the built-in --dataset")
        test_fraction = None if args.dataset == "toy-sine" else 0.1
        return load_builtin(args.dataset, seed=args.seed, valid_fraction=valid_fraction,
                            test_fraction=test_fraction)
    if not args.data:
        raise CLIError("no data: give --data FILE (with --target COL) or --dataset NAME")
    from autodeuq.preprocess import TableOptions

    options = TableOptions(categorical=args.categorical or "onehot", impute=args.impute or "mean",
                           drop=tuple(args.drop or ()), id_column=args.id_column,
                           drop_missing_target=bool(args.drop_missing_target))
    dataset = load_files(args.data, args.target, valid=args.valid, test=args.test,
                         valid_fraction=valid_fraction, seed=args.seed, options=options)
    for source, n in dataset.dropped_missing_target.items():
        print(f"autodeuq: {source}: left out {n} row(s) whose target is missing (--drop-missing-target)", flush=True)
    return dataset


def _json_option(flag, text):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{flag}: not valid JSON ({exc})") from None


def _search_options(args, space) -> dict:
    """The searcher options the flags ask for, checked against ``--search`` and the space."""
    from autodeuq.search import ablation_fixed_arch, ablation_fixed_hp, surrogate_searchers
    from autodeuq.space import SpaceError

    bo_searches = surrogate_searchers()
    for flag, value in (("--surrogate", args.surrogate), ("--acq", args.acq)):
        if value is not None and args.search not in bo_searches:
            raise CLIError(f"{flag} applies to the BO-based searchers ({', '.join(bo_searches)}), "
                           f"not to --search {args.search}")
    options = {}
    if args.search in bo_searches:
        options = {"surrogate": args.surrogate or "et", "acq": args.acq or "lcb"}
    for flag, value, search, option, resolve in (
        ("--fixed-hp", args.fixed_hp, "age-fixed-hp", "fixed_hp", ablation_fixed_hp),
        ("--fixed-arch", args.fixed_arch, "bo-fixed-arch", "fixed_arch", ablation_fixed_arch),
    ):
        if value is not None and args.search != search:
            raise CLIError(f"{flag} applies to --search {search}, not to --search {args.search}")
        if args.search == search:
            try:
                options[option] = resolve(space, None if value is None else _json_option(flag, value))
            except SpaceError as exc:
                raise CLIError(f"{flag}: {exc}") from None
    return options


def _check_ensemble_args(args):
    from autodeuq.pipeline import check_ensemble_parameters

    check_ensemble_parameters(ensemble_size=args.size, selector=args.selector, selection_score=args.selection_score,
                              selection_stop=args.selection_stop, diversity=args.diversity,
                              selection_bags=args.selection_bags, calibrate=args.calibrate, refit=args.refit)


def _check_search_args(args):
    """Refuse, before anything starts, option values that would make every evaluation fail or misbehave."""
    from autodeuq.pipeline import check_search_parameters

    check_search_parameters(search=args.search, max_evals=args.max_evals, epochs=args.epochs, seed=args.seed,
                            timeout=args.timeout, eval_timeout=args.eval_timeout, eval_budget=args.eval_budget,
                            evaluator=args.evaluator,
                            workers=args.workers, cpus_per_eval=args.cpus_per_eval, gpus_per_eval=args.gpus_per_eval,
                            valid_fraction=_valid_fraction(args), early_discarding=args.early_discarding,
                            population_size=args.population_size, tournament_size=args.tournament_size,
                            sha_min_epochs=args.sha_min_epochs, sha_reduction=args.sha_reduction,
                            sha_rungs=args.sha_rungs, iepoch_epochs=args.iepoch_epochs, iepoch_top_k=args.iepoch_top_k)
    repeated = sorted({t for t in args.target or [] if args.target.count(t) > 1})
    if repeated:
        raise CLIError(f"--target {repeated[0]} is given more than once; name each target column once")


def cmd_search(args, *, timeout=None):
    """``autodeuq search``; ``timeout``: the search's wall-clock limit when not ``args.timeout``."""
    from autodeuq.pipeline import fill_catalog
    from autodeuq.space import load_space

    _check_search_args(args)
    dataset = _load_dataset(args)
    space = load_space(args.space or ("toy" if args.dataset == "toy-sine" else "tabular")).for_rows(
        len(dataset.x_train))
    search_options = _search_options(args, space)
    run_dir = Path(args.run_dir or f"runs/{Path(dataset.name).stem}-{args.search}")

    def announce(evaluator):
        print(f"autodeuq: {dataset.name}: {len(dataset.x_train)} train / {len(dataset.x_valid)} validation rows, "
              f"{dataset.n_features} feature(s), target(s) {dataset.target_names}; space {space.name} "
              f"({space.describe_sizes()}); "
              f"search {args.search}; {evaluator.n_slots} parallel evaluation(s); catalog {run_dir}", flush=True)

    try:
        summary = fill_catalog(
            space, dataset, run_dir, search=args.search, search_options=search_options, max_evals=args.max_evals,
            timeout=timeout or args.timeout, seed=args.seed, epochs=args.epochs, early_discarding=args.early_discarding,
            sha_min_epochs=args.sha_min_epochs, sha_reduction=args.sha_reduction, sha_rungs=args.sha_rungs,
            iepoch_epochs=args.iepoch_epochs, iepoch_top_k=args.iepoch_top_k, evaluator=args.evaluator,
            workers=args.workers, cpus_per_eval=args.cpus_per_eval, gpus_per_eval=args.gpus_per_eval,
            ray_address=args.ray_address, eval_timeout=args.eval_timeout, eval_budget=args.eval_budget,
            new_run=args.new_run, population_size=args.population_size, tournament_size=args.tournament_size,
            progress=not args.no_progress, on_start=announce, log=lambda line: print(line, flush=True))
    except OSError as exc:  # the run directory cannot be written, say
        raise _os_error(exc) from None
    print(f"search: {summary}", flush=True)
    if summary.interrupted:
        print(f"interrupted: the catalog is consistent; run the same command again to resume {run_dir}")
        raise SystemExit(143 if summary.stopped_by == "terminated" else 130)
    summary.raise_for_error()
    return run_dir


def _check_out(path: Path, flag: str) -> None:
    """Refuse, before any work, an output path that can never be written as a file."""
    if path.is_dir():
        raise CLIError(f"{flag} {path}: is a directory; give a file name")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise CLIError(f"{flag} {path}: {parent} is not a directory")
            break


def _os_error(exc: OSError) -> CLIError:
    where = f"{exc.filename}: " if exc.filename else ""
    return CLIError(f"{where}{exc.strerror or exc}")


def _refit_evaluator(args) -> dict:
    """Where ``run`` refits the members: on its search's evaluator (Ray's workers are still up);
    ``ensemble`` alone refits in its own process."""
    if getattr(args, "evaluator", "serial") != "ray":
        return {}
    return {"refit_evaluator": "ray",
            "refit_evaluator_options": {"workers": args.workers, "cpus_per_eval": args.cpus_per_eval,
                                        "gpus_per_eval": args.gpus_per_eval, "address": args.ray_address}}


def cmd_ensemble(args, run_dir=None, deadline=None):
    """``autodeuq ensemble``; ``deadline``: the :func:`time.monotonic` time by which a run must end."""
    from autodeuq.report import build_and_report

    _check_ensemble_args(args)
    run_dir = Path(run_dir or args.run_dir)
    out = Path(args.out) if args.out else run_dir / "ensemble.json"
    _check_out(out, "--out")
    with warnings.catch_warnings(record=True) as caught:  # shown after the report's lines
        try:
            report = build_and_report(run_dir, size=args.size, selector=args.selector, score=args.selection_score,
                                      test_file=getattr(args, "test", None), manifest=out,
                                      stop=args.selection_stop, diversity=args.diversity, calibrate=args.calibrate,
                                      bags=args.selection_bags, refit=args.refit, deadline=deadline,
                                      **_refit_evaluator(args))
        except OSError as exc:  # FileNotFoundError of a --test file included
            raise _os_error(exc) from None
    for warning in caught:
        warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    print(report.table())
    print(report.refit)
    if report.ensemble.calibration is not None:
        why = (report.ensemble.selection or {}).get("calibration", "recalibrated")
        scale = ", ".join(f"{c:.3g}" for c in report.ensemble.scale)
        print(f"{why}; predictive std x {scale} (per target)")
    print(f"ensemble: {report.ensemble}")
    print(f"wrote {out}, {out.parent / 'metrics.json'}")
    for plot in report.plots:
        print(f"wrote {plot}")


def _interval_levels(levels) -> list[tuple[float, str]]:
    """(level, column suffix) of each ``--interval``, refused unless a probability in (0, 1 - 1e-9]."""
    from autodeuq.metrics import check_level

    out = []
    for level in levels or []:
        level = check_level(level)
        suffix = f"{100 * level:.10g}".replace(".", "_")  # 0.9 -> 90, 0.975 -> 97_5
        if suffix not in [s for _, s in out]:
            out.append((level, suffix))
    return out


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


def cmd_predict(args):
    import pandas as pd

    from autodeuq.data import read_table
    from autodeuq.ensemble import UncertaintyPrediction, load_ensemble
    from autodeuq.fileio import atomic_write
    from autodeuq.metrics import central_interval

    if Path(args.ensemble).is_dir() and not (Path(args.ensemble) / "ensemble.json").is_file():
        raise CLIError(f"--ensemble {args.ensemble}: is a directory without ensemble.json; give the manifest file "
                       f"or an exported ensemble folder")
    levels = _interval_levels(args.interval)
    out = Path(args.out)
    _check_out(out, "--out")
    try:
        ensemble = load_ensemble(args.ensemble)
        # Columns are matched by name; target columns, when present, are ignored.
        x = read_table(args.data)
        ids, features = _split_id_column(x, ensemble, args.id_column, str(args.data))
        # The components once, for the moments and the intervals alike.
        # Rows with unseen categories: an UnseenCategoryWarning, one line on stderr like every AutoDEUQWarning.
        means, variances = ensemble.components(features, source=str(args.data))
    except OSError as exc:
        raise _os_error(exc) from None
    result = UncertaintyPrediction.from_mixture(means, variances, ensemble.weights)
    intervals = [(suffix, central_interval(means, variances, ensemble.weights, level)) for level, suffix in levels]
    columns = {} if ids is None else {ids.name: ids.to_numpy()}  # an id column goes first
    for j, t in enumerate(ensemble.target_names):
        columns[f"{t}_mean"] = result.mean[:, j]
        columns[f"{t}_std"] = result.std[:, j]
        columns[f"{t}_aleatoric_std"] = result.aleatoric_std[:, j]
        columns[f"{t}_epistemic_std"] = result.epistemic_std[:, j]
        for suffix, (lower, upper) in intervals:
            columns[f"{t}_lower_{suffix}"] = lower[:, j]
            columns[f"{t}_upper_{suffix}"] = upper[:, j]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"--out {out}: cannot create its folder: {exc.strerror or exc}") from None
    atomic_write(out, pd.DataFrame(columns).to_csv(index=False).encode())
    # What the columns hold is in `predict --help` and the README; each run printed it again.
    print(f"wrote {len(x)} predictions to {out}: columns {', '.join(columns)} "
          f"(all standard deviations, explained in `autodeuq predict --help`)")


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
    from autodeuq.result import MODEL_STATUSES, Status

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
    models = frame[frame["status"].isin(MODEL_STATUSES)].sort_values([nll_column, "id"], na_position="last")
    if models.empty:
        print("no trained network yet")
    else:
        shown = models if args.top == 0 else models.head(args.top)
        scale = ("in the data's original units, as metrics.json reports it" if original
                 else "in standardized units (the catalog does not record the targets' scale)")
        print(f"best {len(shown)} of {len(models)} trained networks by validation NLL ({nll_column}, lower is "
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
        ensemble = load_ensemble(args.ensemble)
        manifest = ensemble.save(args.out, self_contained=True)
    except OSError as exc:
        raise _os_error(exc) from None
    files = [manifest, *(manifest.parent / "members" / f"{i}.keras" for i in ensemble.member_ids)]
    size = sum(f.stat().st_size for f in files)
    print(f"wrote {manifest} and {len(ensemble.member_ids)} member model(s) to {manifest.parent} "
          f"({size / 1e6:.2f} MB); predict with --ensemble {manifest}")


def cmd_run(args):
    from autodeuq.pipeline import ensemble_deadline, search_timeout

    started = time.monotonic()
    _check_ensemble_args(args)  # before the search, not after it
    if args.out:
        _check_out(Path(args.out), "--out")
    # --timeout bounds the whole run: the search stops early enough for the ensemble step, whose
    # refit retrains only the members that fit in what is left.
    run_dir = cmd_search(args, timeout=search_timeout(args.timeout))
    cmd_ensemble(args, run_dir=run_dir, deadline=ensemble_deadline(started, args.timeout))


def _show_warning(message, category, filename, lineno, file=None, line=None, _default=warnings.showwarning):
    """autodeuq's own warnings as one line on stderr; any other as Python shows it."""
    if issubclass(category, AutoDEUQWarning):
        print(f"autodeuq: warning: {message}", file=sys.stderr)
    else:
        _default(message, category, filename, lineno, file, line)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {"search": cmd_search, "ensemble": cmd_ensemble, "predict": cmd_predict, "run": cmd_run,
                "catalog": cmd_catalog, "show": cmd_catalog, "export": cmd_export}
    signals = contextlib.nullcontext()
    if args.command in ("search", "run"):
        from autodeuq.runner import sigterm_interrupts

        signals = sigterm_interrupts()  # SIGTERM stops like Ctrl-C, exit status 143
    sigterm = None
    try:
        with signals as sigterm, warnings.catch_warnings():
            warnings.showwarning = _show_warning
            warnings.simplefilter("always", AutoDEUQWarning)  # each, not the first of a kind per place
            handlers[args.command](args)
    except AutoDEUQError as exc:
        from autodeuq.runner import SearchError

        print(f"autodeuq: error: {error_line(exc)}", file=sys.stderr)
        return EXIT_SEARCH_FAILED if isinstance(exc, SearchError) else EXIT_USAGE
    except KeyboardInterrupt as exc:
        print("autodeuq: interrupted", file=sys.stderr)
        return 143 if getattr(sigterm, "received", False) else getattr(exc, "exit_status", 130)
    except SystemExit as exc:
        return int(exc.code or 0)
    except Exception:  # noqa: BLE001 - not one of autodeuq's errors: a bug, whose traceback helps fix it
        traceback.print_exc()
        print("autodeuq: internal error: this is a bug in autodeuq; please report it with the traceback above",
              file=sys.stderr)
        return EXIT_INTERNAL
    return 0


if __name__ == "__main__":
    sys.exit(main())
