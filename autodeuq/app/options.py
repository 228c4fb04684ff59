"""Every option of a run, defined once.

:data:`OPTIONS` lists each option of the whole job (reading the table, the search, its workers,
the ensemble): its name, its constraint, its default, its help and its command-line flag
(:class:`autodeuq.core.option.Option`). The early-discarding rules declare their own options,
which the table takes from the rules registered when this module is first imported
(:func:`autodeuq.discard.options`). From it
come the options of ``autodeuq search | ensemble | run`` (:func:`add_to_parser`), the keyword-only
parameters of :class:`~autodeuq.AutoDEUQRegressor` and their documentation, and the command-line
reference of the documentation. The values a front end received are checked once, before any
work, into three typed configurations (:class:`TableConfig`, :class:`SearchConfig`,
:class:`EnsembleConfig`; :func:`resolve`), which the stages of the job (:mod:`autodeuq.app.pipeline`)
take.

A help text names other options in braces (``{max_evals}``): the command line shows them as its
flags (``--max-evals``), the estimator's documentation as parameters (``max_evals``).

This module imports nothing heavy (the name tables it reads import none of what they name), so
``autodeuq --help`` stays fast.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from autodeuq import discard, search
from autodeuq.core.errors import ParameterError, ParameterWarning
from autodeuq.core.option import (  # the constraints and Option, importable from here as before
    TEN_YEARS,
    Boolean,
    Constraint,
    Fraction,
    Integer,
    Json,
    Names,
    OneOf,
    Option,
    Path,
    Real,
    Text,
)
from autodeuq.engine import evaluator
from autodeuq.ensemble import options as ensemble_choices
from autodeuq.table import labels, preprocess
from autodeuq.table.data import DEFAULT_VALID_FRACTION, SMALL_DATA_ROWS
from autodeuq.tasks.classification import ClassificationTask

__all__ = ["OPTIONS", "EnsembleConfig", "Option", "SearchConfig", "TableConfig", "add_option", "add_to_parser",
           "configure", "flag", "given", "numpydoc_parameters", "option_of", "resolve", "signature_parameters"]

class Space(Constraint):
    """A shipped space's name, a space file, a mapping or a :class:`~autodeuq.search.space.SearchSpace`."""

    def check(self, name, value):
        from autodeuq.search.space import SearchSpace

        if not isinstance(value, (str, os.PathLike, dict, SearchSpace)):
            raise ParameterError(name, "must be a shipped space's name, a space file or a SearchSpace", value)

    def describe(self):
        return "str, path or SearchSpace"


class ClassWeight(Constraint):
    """``"none"``, ``"balanced"`` or a mapping of class labels to positive weights (JSON on the command line)."""

    def check(self, name, value):
        labels.check_class_weight(name, value)

    def parse(self, text):
        if text in labels.CLASS_WEIGHTS:
            return text
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise argparse.ArgumentTypeError(f"must be none, balanced or a JSON object of class weights, "
                                             f"got {text!r}") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"must be none, balanced or a JSON object of class weights, got {text!r}")
        return value

    def describe(self):
        return '{"none", "balanced"} or dict'


# ----------------------------------------------------------------------------- the table
def _evolves(values):
    return values["search"] in search.evolution_searchers()


def _takes_surrogate(values):
    return values["search"] in search.surrogate_searchers()


def _searches():  # read when first needed: a searcher registered later is a choice too
    return (*search.SEARCHERS, *search.ABLATIONS)


_RAY_ONLY = "applies to {evaluator} ray, not to {evaluator} {value}"


def _on_ray(values):
    return values["evaluator"] == "ray"

_BO = ", ".join(search.surrogate_searchers())

OPTIONS: tuple[Option, ...] = (
    # ------------------------------------------------------------------ table
    Option("categorical", "table", "onehot", OneOf(preprocess.CATEGORICAL),
           "encoding of non-numeric columns: onehot (one 0/1 input per training category; an unseen category is "
           "all zeros), ordinal (the category's index; unseen: -1), none (refuse them)"),
    Option("categorical_columns", "table", None, Names(separator=","),
           "feature columns that are categories whatever they hold (comma-separated; the option may repeat): "
           "numbers become categories by their value (a Cylinders column of 4, 6 and one 'rotary'), and neither "
           "many distinct values (a Manufacturer column with a value for every other row) nor a stray text cell "
           "refuses the column", metavar="COL[,COL...]"),
    Option("impute", "table", "mean", OneOf(preprocess.IMPUTE),
           "missing feature values: the training mean or median of a numeric column, the most frequent training "
           "category of a categorical one, also at prediction; none refuses them"),
    Option("drop", "table", None, Names(), "a column that is not a feature (ignored, also by predict); repeat the "
           "option for several", metavar="COL"),
    Option("id_column", "table", None, Text(), "a row identifier: not a feature; 'autodeuq predict' copies it into "
           "its output", metavar="COL"),
    Option("drop_missing_target", "table", False, Boolean(), "leave out the rows whose target is missing (of the "
           "training, validation and test tables: a test row without a target cannot be scored), and say how many "
           "per table, instead of refusing the table"),
    Option("task", "table", "auto", OneOf(labels.TASKS),
           "what the target is: auto (classification for a target of text, booleans or categories, regression for "
           "numbers; the run's first line says which and why), regression, classification (one target column "
           "whose values are class labels)"),
    Option("class_weight", "table", "none", ClassWeight(),
           "classification: the classes' weights in the training loss; balanced weighs each class by the inverse "
           "of its share of the training rows; or a mapping of classes to weights (JSON on the command line, "
           "'{{\"fault\": 5}}'; a class left out weighs 1). Validation, selection and scores stay unweighted",
           metavar="WEIGHTS"),
    Option("label_smoothing", "table", 0.0, Real(0.0, 0.5, strict=False),
           "classification: train toward (1 - e) on the observed class and e / K on every class instead of all on "
           "the observed one (Szegedy et al. 2016), which bounds how confident a network can grow; validation, "
           "selection and scores keep the plain log loss", metavar="E"),
    Option("valid_fraction", "table", DEFAULT_VALID_FRACTION, Fraction(),
           "fraction of the training rows held out for validation when no validation rows are given (by class "
           "for classification)",
           metavar="F"),
    # ------------------------------------------------------------------ search
    Option("space", "search", "tabular", Space(), "search space: 'toy', 'tabular' or a YAML/JSON file",
           metavar="NAME_OR_FILE", default_text="tabular (toy for the built-in dataset toy-sine)"),
    Option("search", "search", "agebo", OneOf(_searches),
           "search algorithm; the ablations: age-fixed-hp (aging evolution over the architecture, training "
           "hyperparameters fixed by {fixed_hp}), bo-fixed-arch (BO over the training hyperparameters, "
           "architecture fixed by {fixed_arch})"),
    Option("surrogate", "search", "et", OneOf(lambda: tuple(search.SURROGATES)),
           f"surrogate model of the BO-based searchers ({_BO})", applies=_takes_surrogate, unused="refuse",
           requirement="applies to the BO-based searchers ({searchers}), not to {search} {value}"),
    Option("acq", "search", "lcb", OneOf(lambda: tuple(search.ACQUISITIONS)),
           f"acquisition function of the BO-based searchers ({_BO})", applies=_takes_surrogate, unused="refuse",
           requirement="applies to the BO-based searchers ({searchers}), not to {search} {value}"),
    Option("random_interleave", "search", 0.0, Real(0.0, 1.0, strict=False),
           f"probability that a suggestion of the BO-based searchers ({_BO}) after their first random ones is "
           "drawn at random instead (interleaved random configurations, Hutter et al. 2011)", metavar="P",
           applies=_takes_surrogate, unused="refuse",
           requirement="applies to the BO-based searchers ({searchers}), not to {search} {value}"),
    Option("fixed_hp", "search", None, Json(dict, "a dict"),
           "with {search} age-fixed-hp: the training hyperparameters (a JSON object on the command line); those "
           "not given keep their defaults", metavar="JSON",
           default_text="learning_rate 0.01, batch_size 16, optimizer adam, patience_reduce_lr 10, "
                        "patience_early_stopping 20",
           applies=lambda v: v["search"] == "age-fixed-hp", unused="refuse",
           requirement="applies to {search} age-fixed-hp, not to {search} {value}"),
    Option("fixed_arch", "search", None, Json(list, "a list of integers"),
           "with {search} bo-fixed-arch: the architecture vector (a JSON list on the command line), one integer "
           "per architecture variable", metavar="JSON",
           default_text="every cell Dense with the units nearest 64 and tanh, no skip connection",
           applies=lambda v: v["search"] == "bo-fixed-arch", unused="refuse",
           requirement="applies to {search} bo-fixed-arch, not to {search} {value}"),
    Option("max_evals", "search", 100, Integer(1, 10**6),
           "evaluations to finish in the run directory, earlier sessions included (the catalog's size)",
           metavar="N"),
    Option("population_size", "search", "auto", Integer(2, 10**5, auto=True),
           "population of aging evolution: the last P successful evaluations, random until there are P; auto: a "
           "fifth of {max_evals}, from 10 to 100", metavar="P", applies=_evolves, unused="refuse"),
    Option("tournament_size", "search", "auto", Integer(1, 10**5, auto=True),
           "tournament of aging evolution: each child mutates the best of S members drawn from the population, "
           "1 <= S <= P; auto: a third of P, at least 2", metavar="S", applies=_evolves, unused="refuse"),
    Option("timeout", "search", None, Real(0, TEN_YEARS),
           "wall-clock limit in seconds: of the search ('autodeuq search'), of the search and the ensemble step "
           "('autodeuq run' and the estimator's fit: the search keeps a tenth of it, 30 s to 5 min, for the "
           "ensemble step); no evaluation starts that would not finish in time", metavar="S"),
    Option("eval_timeout", "evaluation", None, Real(0, TEN_YEARS),
           "seconds an evaluation may run on a worker; overrunning evaluations are cancelled and recorded as "
           "failures", metavar="S"),
    Option("eval_budget", "search", None, Real(0, TEN_YEARS),
           "seconds each training may take: it ends after the epoch when another one as long would pass them, "
           "keeping its best epoch so far, like an early stop", metavar="S"),
    Option("epochs", "search", None, Integer(1, 10**5, optional=True), "override of the space's epoch budget",
           metavar="E", default_text="the space's"),
    Option("early_discarding", "search", "auto", OneOf(discard.policies),
           "auto: none, until the trainings tell what the search will cost: sha from then on if the search "
           "is projected to take longer than {discard_budget} on the workers at hand (a resumed run keeps "
           "sha once on; one without decides again from its own trainings). none: every configuration trains "
           "to its own early stop. sha: asynchronous successive halving; a training continues past each rung "
           "epoch (min x reduction^k) only if its validation loss is among the best 1/reduction recorded "
           "there. iepoch: every evaluation of the search trains {iepoch_epochs} epochs, then the "
           "{iepoch_top_k} best configurations are trained to the full budget"),
    # The options of early discarding: the cost policy's, then each rule's (autodeuq.discard.options).
    *discard.options(),
    Option("seed", "search", 0, Integer(0, 2**32 - 1, optional=True),
           "seed of the validation split, the searcher, the trainings and the selection, from 0 to 2**32 - 1 "
           "(None: 0)", metavar="N"),
    Option("run_dir", "search", None, Path(), "catalog directory; an existing one is resumed", metavar="DIR",
           default_text="runs/<dataset>-<search> on the command line; for the estimator a temporary directory "
                        "deleted with it"),
    Option("new_run", "search", False, Boolean(), "refuse to resume: the run directory must not hold a catalog yet"),
    Option("progress", "search", True, Boolean(), "a progress bar (plain lines when the output is not a terminal)"),
    # ------------------------------------------------------------------ evaluation
    Option("evaluator", "evaluation", "ray", OneOf(tuple(evaluator.EVALUATORS)),
           "ray: parallel Ray tasks; serial: in-process, one at a time ({workers}, {ray_address} and "
           "{gpus_per_eval} are then ignored)"),
    Option("workers", "evaluation", None, Integer(1, 10**5, optional=True), "concurrent evaluations", metavar="N",
           default_text="what the Ray cluster can run", applies=_on_ray, requirement=_RAY_ONLY, depends="evaluator"),
    Option("ray_address", "evaluation", None, Text(), "join an existing Ray cluster ('auto' or host:port)",
           metavar="ADDR", default_text="the RAY_ADDRESS environment variable when set, else a new local instance",
           applies=_on_ray, requirement=_RAY_ONLY, depends="evaluator", parameter="address"),
    Option("cpus_per_eval", "evaluation", None, Real(0, 4096.0),
           "CPUs per evaluation; TensorFlow uses that many threads", metavar="C", default_text="1"),
    Option("gpus_per_eval", "evaluation", None, Real(0, 1024.0, strict=False),
           "GPUs per evaluation (a fraction shares a GPU; 0: the evaluations see no GPU)", metavar="G",
           default_text="1 when the cluster has GPUs, else 0", applies=_on_ray, requirement=_RAY_ONLY,
           depends="evaluator"),
    # ------------------------------------------------------------------ ensemble
    Option("ensemble_size", "ensemble", 5, Integer(1, 1000), "distinct ensemble members (at most)", flag="--size",
           metavar="K", parameter="size"),
    Option("selector", "ensemble", "auto", OneOf(ensemble_choices.SELECTORS),
           "selection method: greedy with replacement (Caruana et al. 2004), without (each member once, equal "
           "weights), or the best {ensemble_size} models; auto: greedy for regression, greedy-noreplace for "
           "classification"),
    Option("selection_score", "ensemble", "mixture", OneOf(ensemble_choices.SCORES),
           "what selection minimizes on the validation rows: the ensemble's exact mixture NLL or its moment-matched "
           "Gaussian NLL", parameter="score"),
    Option("selection_stop", "ensemble", "size", OneOf(ensemble_choices.STOPS),
           "size: always {ensemble_size} distinct members (when the catalog has that many usable models); "
           "improvement: stop as soon as no addition improves the validation NLL (may leave one member)",
           parameter="stop"),
    Option("diversity", "ensemble", "none", OneOf(ensemble_choices.DIVERSITY),
           "at most one member per architecture, or per set of activation functions"),
    Option("selection_pool", "ensemble", "auto", Real(0.0, 1.0, optional=False, auto=True),
           "select only among the best fraction F of the catalog's models, ranked by their own validation NLL "
           "(at least {ensemble_size}; library pruning, Caruana et al. 2006); 1: the whole catalog", metavar="F",
           default_text="auto: 0.4 for regression, 1 for classification", parameter="pool"),
    Option("selection_bags", "ensemble", 0, Integer(0, 10**4),
           "repeat the selection on B random halves of the validation rows and average the weights (bagged "
           "selection; 0: select once on all rows)", metavar="B", parameter="bags"),
    Option("calibrate", "ensemble", "auto", OneOf(ensemble_choices.CALIBRATIONS),
           "scale (regression): recalibrate each target's predictive std by a factor fitted on out-of-fold "
           "selections of the validation rows; temperature (classification): divide the members' logits by one "
           "temperature fitted the same way; auto: the task's, when the training and validation rows number more "
           f"than {SMALL_DATA_ROWS}"),
    Option("refit", "ensemble", "auto", Boolean(auto=True),
           "retrain the selected members on the training and validation rows together, each for the epochs of its "
           "best validation loss with the learning rates it used then; off: keep the networks the search trained. "
           "After a search, the members retrain at once on its Ray workers. Under {timeout}, a member is refitted "
           "only if its retraining fits in the time left. After a cross-fit ({crossfit}), asking for it retrains the "
           "configurations selected on every row in place of their fold networks",
           default_text=f"auto: when the training and validation rows number at most {SMALL_DATA_ROWS} and the "
                        f"ensemble is not cross-fitted"),
    Option("crossfit", "ensemble", "auto", Boolean(auto=True),
           "cross-fit the ensemble: train the best configurations again on {crossfit_folds} folds of the training and "
           "validation rows (each fold's network stops early on the fold it leaves out), select, recalibrate and fit "
           "the conformal intervals on their out-of-fold predictions of every row, and predict with the fold networks "
           "of the configurations selected (or, with {refit}, with those configurations retrained on every row)",
           default_text=f"auto: for classification, when the training and validation rows number at most "
                        f"{ClassificationTask.auto_crossfit_rows}"),
    Option("crossfit_folds", "ensemble", 5, Integer(2, 100), "folds of the cross-fitted ensemble", metavar="K"),
    Option("crossfit_configs", "ensemble", "auto", Integer(1, 10**4, auto=True),
           "configurations cross-fitted (the best of the search, one per configuration)", metavar="N",
           default_text="auto: twice {ensemble_size}"),
)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
#: The options by the library parameter they set (:attr:`Option.parameter`).
BY_PARAMETER: dict[str, Option] = {o.parameter: o for o in OPTIONS if o.parameter}


def option_of(parameter: str) -> Option | None:
    """The option that sets the library parameter ``parameter`` (its own name or
    :attr:`Option.parameter`), or None.

    >>> option_of("size").name, option_of("max_evals").name, option_of("manifest")
    ('ensemble_size', 'max_evals', None)
    """
    return BY_NAME.get(parameter) or BY_PARAMETER.get(parameter)


def flag(name: str) -> str:
    """The command-line flag of the option ``name``."""
    return BY_NAME[name].cli_flag


# ----------------------------------------------------------------------------- configurations
def _config(name: str, groups: tuple[str, ...], doc: str):
    fields = [(o.name, Any, dataclasses.field(default=o.default)) for o in OPTIONS if o.group in groups]
    cls = dataclasses.make_dataclass(name, fields, namespace={"GROUPS": groups}, frozen=True, kw_only=True)
    cls.__module__ = __name__
    cls.__doc__ = doc + "\n\nFields: " + ", ".join(f[0] for f in fields) + " (see :data:`OPTIONS`)."
    return cls


TableConfig = _config("TableConfig", ("table",), "How a table is read and split (checked by :func:`resolve`).")
SearchConfig = _config("SearchConfig", ("search", "evaluation"),
                       "What the search does and where it runs (checked by :func:`resolve`).")
EnsembleConfig = _config("EnsembleConfig", ("ensemble",), "How the ensemble is built (checked by :func:`resolve`).")


def resolve(values: Mapping[str, Any], configs=(TableConfig, SearchConfig, EnsembleConfig)) -> tuple:
    """Check ``values`` (option name -> value; the others keep their defaults) and return one
    configuration of each class of ``configs``, in that order.

    Every value is checked against its option's constraint, then against the others (an option
    that does not apply: see :class:`Option`); nothing has started yet.

    Raises
    ------
    ParameterError
        Naming the first bad option, what it must be and the value given.
    """
    unknown = sorted(set(values) - set(BY_NAME))
    if unknown:
        raise ParameterError(unknown[0], "is not an option of autodeuq", values[unknown[0]])
    groups = {g for c in configs for g in c.GROUPS}
    elsewhere = sorted(name for name in values if BY_NAME[name].group not in groups)
    if elsewhere:
        raise ParameterError(elsewhere[0], f"is not an option of {', '.join(c.__name__ for c in configs)}",
                             values[elsewhere[0]])
    full = {o.name: values.get(o.name, o.default) for o in OPTIONS}
    for o in OPTIONS:
        if o.group not in groups:
            continue
        value = full[o.name]
        o.constraint.check(o.name, value)
        if o.applies is not None and not o.applies(full) and value != o.default:
            if o.unused == "refuse":
                raise _unused(o, value, full)
            import warnings

            warnings.warn(ParameterWarning(o.name, o.requirement.format(value=full[o.depends],
                                                                       **{o.depends: "{" + o.depends + "}"}),
                                           value, refers=(o.depends,)), stacklevel=preprocess._caller_level())
    if "search" in groups:
        _check_search(full)
    return tuple(c(**{o.name: full[o.name] for o in OPTIONS if o.group in c.GROUPS}) for c in configs)


def _unused(o: Option, value, full) -> ParameterError:
    if o.name in ("population_size", "tournament_size"):
        return ParameterError(o.name, f'must be "auto" with search {full["search"]!r}: only aging evolution '
                                      f'({", ".join(search.evolution_searchers())}) has a population', value)
    requirement = o.requirement.format(searchers=", ".join(search.surrogate_searchers()), search="{search}",
                                       value=full[o.depends])
    return ParameterError(o.name, requirement, value, refers=(o.depends,))


def _check_search(v: Mapping) -> None:
    """The rules between search options."""
    # The rule reads and checks its own options (those the data settles are checked when the search starts).
    discard.create("sha" if v["early_discarding"] == "auto" else v["early_discarding"], v, epochs=v["epochs"])
    search.evolution_options(v["search"], v["population_size"], v["tournament_size"], v["max_evals"])


def configure(config_class, **values):
    """One configuration of ``config_class`` from keyword values, checked as :func:`resolve` does.

    >>> configure(SearchConfig, search="random", max_evals=4).max_evals
    4
    """
    return resolve(values, (config_class,))[0]


# ----------------------------------------------------------------------------- front ends
def add_to_parser(parser: argparse.ArgumentParser, groups: Sequence[str], titles: Mapping[str, str]) -> dict:
    """Add the options of ``groups`` to ``parser``, one argument group each (titled by ``titles``);
    the argument groups by name.

    Arguments default to :data:`argparse.SUPPRESS`: an option not given is absent from the
    parsed namespace, so the command line knows what was given (:func:`given`) and the defaults
    come from :data:`OPTIONS` alone.
    """
    added = {}
    for group in groups:
        added[group] = parser.add_argument_group(titles[group])
        for o in OPTIONS:
            if o.group == group:
                add_option(added[group], o)
    return added


def add_option(parser, o: Option, *, required: bool = False, help: str | None = None) -> None:
    """Add the option ``o`` to ``parser`` (or an argument group); ``help`` replaces its own where a
    command uses it in a narrower sense."""
    text = help or o.help_text(flag)
    kwargs: dict[str, Any] = {"dest": o.name, "default": argparse.SUPPRESS, "metavar": o.metavar}
    if required:
        kwargs["required"] = True
    else:
        text += f" (default: {o.shown_default()})"
    if isinstance(o.constraint, Boolean):
        del kwargs["metavar"]
        # An option that is on by default (or "auto") can be turned off: --x / --no-x.
        kwargs["action"] = argparse.BooleanOptionalAction if o.default is not False else "store_true"
    elif isinstance(o.constraint, Names):
        kwargs["action"] = "append" if o.constraint.separator is None else "extend"
        if o.constraint.separator is not None:
            kwargs["type"] = o.constraint.parse
    else:
        kwargs["type"] = o.constraint.parse
        kwargs["choices"] = o.constraint.choices
    parser.add_argument(o.cli_flag, help=text.replace("%", "%%"), **kwargs)


def given(namespace: argparse.Namespace) -> dict[str, Any]:
    """The options of :data:`OPTIONS` that a parsed command line gave (see :func:`add_to_parser`)."""
    return {name: value for name, value in vars(namespace).items() if name in BY_NAME}


def signature_parameters():
    """The estimator's keyword-only parameters, one per option, with its default."""
    import inspect

    return [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default) for o in OPTIONS]


def numpydoc_parameters(indent: str = "    ") -> str:
    """A numpydoc ``Parameters`` section of every option, for the estimator's docstring."""
    import textwrap

    lines = []
    for o in OPTIONS:
        lines.append(f"{indent}{o.name} : {o.constraint.describe()}, default={o.default_literal()}")
        text = o.help_text(lambda name: f"``{name}``")
        if o.default_text is not None:
            text += f" (default: {o.default_text})"
        text = text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")
        lines.extend(textwrap.wrap(text, 100, initial_indent=2 * indent, subsequent_indent=2 * indent,
                                   break_on_hyphens=False))
    return "\n".join(lines)
