"""Extending autodeuq from outside the package, as docs/guide/extending.md shows: a searcher, an
early-discarding rule and a task are one class each plus one registry line, written here in test
code (no file of the package edited), and a tiny serial search runs with each, from the estimator's
pipeline and from the command line (the task's through the ensemble stage too)."""
from __future__ import annotations

import numpy as np
import pytest

from autodeuq import discard, search, tasks
from autodeuq.app.cli import build_parser, main
from autodeuq.app.options import SearchConfig, configure
from autodeuq.app.pipeline import fill_catalog
from autodeuq.catalog import Catalog, CatalogError
from autodeuq.core.errors import ParameterError
from autodeuq.discard.base import DiscardRule
from autodeuq.report import RegressionScores
from autodeuq.search.base import Searcher
from autodeuq.search.space import load_space
from autodeuq.table.data import toy_sine


def search_help(capsys) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["search", "--help"])
    return capsys.readouterr().out


TINY = {"evaluator": "serial", "max_evals": 3, "epochs": 3, "progress": False, "space": "toy"}


# --------------------------------------------------------------------------- a searcher
class OneArchitecture(Searcher):
    """A toy searcher: the space's first architecture draw, with a fresh draw of the training
    hyperparameters each time (what it is told is ignored)."""

    name = "one-arch"

    def _ask(self, n, rng):
        arch = self.space.sample_arch(np.random.default_rng(0))
        return [self.space.join(arch, h) for h in self.space.decode_hp(self.space.sample_hp_vectors(rng, n))]

    def _tell(self, results):
        pass


@pytest.fixture
def toy_searcher(monkeypatch):
    monkeypatch.setitem(search.SEARCHERS, "one-arch", OneArchitecture)  # the registry line
    return "one-arch"


def test_a_searcher_registered_from_outside_runs_a_search(tmp_path, toy_searcher):
    space, data = load_space("toy"), toy_sine(seed=0)
    config = configure(SearchConfig, **TINY, search=toy_searcher, early_discarding="none")
    summary = fill_catalog(space.for_rows(len(data.x_train)), data, tmp_path / "run", config)
    summary.raise_for_error()
    with Catalog(tmp_path / "run") as catalog:
        frame = catalog.to_dataframe()
        archs = {tuple(catalog.config(i)["arch"]) for i in frame["id"]}
        assert catalog.meta["search"]["search"] == "one-arch"
    assert len(frame) == 3 and (frame["status"] == "done").all()
    assert len(archs) == 1  # every configuration the toy searcher's one architecture


def test_a_registered_searcher_is_a_choice_of_the_command_line(tmp_path, toy_searcher, capsys):
    assert "one-arch" in search_help(capsys)
    code = main(["search", "--dataset", "toy-sine", "--search", "one-arch", "--evaluator", "serial", "--max-evals",
                 "2", "--epochs", "2", "--early-discarding", "none", "--space", "toy", "--no-progress",
                 "--run-dir", str(tmp_path / "cli")])
    assert code == 0
    with Catalog(tmp_path / "cli") as catalog:
        assert catalog.n_done == 2 and catalog.meta["search"]["search"] == "one-arch"


def test_an_unregistered_searcher_is_refused_before_any_work():
    with pytest.raises(ParameterError, match="search must be one of"):
        configure(SearchConfig, search="one-arch")


# --------------------------------------------------------------------------- a discard rule
class FirstComesFirst(DiscardRule):
    """A toy rule: every training reports after its first epoch, and only the first one to
    report goes on; the others are discarded there."""

    name = "first-only"

    def __init__(self):
        self.seen = 0

    @classmethod
    def from_options(cls, options, **context):
        return cls()

    def schedule(self, max_epochs, batch_size=None):
        return {1: [1]} if max_epochs > 1 else {}

    def should_continue(self, rung, loss):
        self.seen += 1
        return self.seen == 1


@pytest.fixture
def toy_rule(monkeypatch):
    monkeypatch.setitem(discard.RULES, "first-only", FirstComesFirst)  # the registry line
    return "first-only"


def test_a_discard_rule_registered_from_outside_rules_a_search(tmp_path, toy_rule):
    assert toy_rule in discard.policies()
    space, data = load_space("toy"), toy_sine(seed=0)
    config = configure(SearchConfig, **TINY, search="random", early_discarding=toy_rule)
    summary = fill_catalog(space.for_rows(len(data.x_train)), data, tmp_path / "run", config)
    summary.raise_for_error()
    with Catalog(tmp_path / "run") as catalog:
        frame = catalog.to_dataframe().sort_values("id")
        assert catalog.meta["search"]["early_discarding"] == {"policy": "first-only"}
    assert list(frame["status"]) == ["done", "discarded", "discarded"]
    assert list(frame["epochs"])[1:] == [1, 1] and list(frame["epochs"])[0] > 1
    assert summary.n_discarded == 2


def test_a_registered_rule_is_a_choice_of_the_command_line(toy_rule, capsys):
    assert "{auto,none,sha,iepoch,first-only}" in search_help(capsys)


def test_the_base_rule_names_nothing_to_train_after_the_search():
    class Never(DiscardRule):
        def schedule(self, max_epochs, batch_size=None):
            return {}

    rule = Never.from_options({})
    assert rule.after_search(catalog=None) == [] and rule.promotions([(1, {}, 0.5)]) == []
    assert rule.describe() == {"policy": ""} and rule.rungs(10) == [] and rule.search_share == 1.0


# --------------------------------------------------------------------------- a rule with an option
TOY_OPTION = """
import json, sys
from autodeuq.core.option import Integer, Option
from autodeuq.discard import RULES
from autodeuq.discard.base import DiscardRule
from autodeuq.report import RegressionScores


class Patient(DiscardRule):
    name = "patient"
    options = (Option("patient_epochs", "search", 1, Integer(1, 100), "epochs each training of the toy rule runs",
                      applies=lambda v: v["early_discarding"] == "patient", depends="early_discarding",
                      requirement="applies to {early_discarding} patient, not to {early_discarding} {value}"),)

    def __init__(self, epochs):
        self.epochs = epochs

    @classmethod
    def from_options(cls, options, **context):
        return cls(options["patient_epochs"])

    def describe(self):
        return {"policy": "patient", "epochs": self.epochs}

    def schedule(self, max_epochs, batch_size=None):
        return {self.epochs: [self.epochs]} if self.epochs < max_epochs else {}

    def should_continue(self, rung, loss):
        return False


RULES["patient"] = Patient  # before the table of a run is first imported: its option joins the table

from autodeuq.app.cli import build_parser
from autodeuq.app.options import SearchConfig, configure
from autodeuq.app.pipeline import fill_catalog
from autodeuq.catalog import Catalog
from autodeuq.core.errors import ParameterError
from autodeuq.search.space import load_space
from autodeuq.table.data import toy_sine

try:
    configure(SearchConfig, early_discarding="patient", patient_epochs=0)
except ParameterError as exc:
    refused = str(exc)
flags = "--patient-epochs" in build_parser()._subparsers._group_actions[0].choices["search"].format_help()
config = configure(SearchConfig, search="random", evaluator="serial", max_evals=2, epochs=3, progress=False,
                   space="toy", early_discarding="patient", patient_epochs=2)
data = toy_sine(seed=0)
fill_catalog(load_space("toy").for_rows(len(data.x_train)), data, sys.argv[1], config).raise_for_error()
with Catalog(sys.argv[1]) as catalog:
    frame = catalog.to_dataframe()
    print(json.dumps({"refused": refused, "flag": flags, "epochs": frame["epochs"].tolist(),
                      "status": frame["status"].tolist(), "rule": catalog.meta["search"]["early_discarding"]}))
"""


def test_a_rule_registered_from_outside_brings_its_own_option(tmp_path):
    # In a fresh process: the table of a run is assembled when autodeuq.app.options is first imported.
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, "-c", TOY_OPTION, str(tmp_path / "run")], capture_output=True, text=True,
                         cwd=root, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["refused"].startswith("patient_epochs must be an integer >= 1")
    assert found["flag"] and found["rule"] == {"policy": "patient", "epochs": 2}
    assert found["epochs"] == [2, 2] and found["status"] == ["discarded", "discarded"]


# --------------------------------------------------------------------------- the old import paths
def test_the_former_modules_names_still_import():
    import importlib
    import sys
    import warnings

    from autodeuq.discard import POLICIES, SuccessiveHalving, rung_schedule  # the former module autodeuq.discard
    from autodeuq.discard.sha import SuccessiveHalving as moved

    assert SuccessiveHalving is moved and POLICIES == ("auto", "none", "sha", "iepoch") and rung_schedule(4) == {
        1: [1], 3: [3]}
    sys.modules.pop("autodeuq.scheduler", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module("autodeuq.scheduler")
    from autodeuq.discard.cost import DiscardByCost
    from autodeuq.discard.scheduler import Scheduler

    assert old.Scheduler is Scheduler and old.DiscardByCost is DiscardByCost and callable(old.training_cost)
    assert any(issubclass(w.category, DeprecationWarning) and "autodeuq.discard" in str(w.message) for w in caught)
    from autodeuq.core.errors import DataError as moved_error
    from autodeuq.data import FLOAT32_MAX, DataError
    from autodeuq.pipeline import evolution_options
    from autodeuq.space import SpaceError
    from autodeuq.table.preprocess import FLOAT32_MAX as moved_max

    assert DataError is moved_error and FLOAT32_MAX == moved_max and callable(evolution_options)
    assert issubclass(SpaceError, ValueError)


def test_an_error_names_the_option_that_sets_a_library_parameter():
    from autodeuq.app.cli import error_line

    assert error_line(ParameterError("size", "must be an integer >= 1", 0)) == "--size must be an integer >= 1, got 0"
    assert error_line(ParameterError("min_epochs", "must be an integer >= 1", 0)).startswith("--sha-min-epochs ")
    assert error_line(ParameterError("address", "is bad", "x")).startswith("--ray-address ")
    assert error_line(ParameterError("level", "is bad", 2.0)).startswith("--interval ")


def test_a_former_module_name_is_the_moved_module_itself():
    import importlib
    import sys
    import warnings

    from autodeuq.table import data

    sys.modules.pop("autodeuq.data", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        former = importlib.import_module("autodeuq.data")
        from autodeuq.evaluator.base import TrainingObjective
    from autodeuq.engine.evaluator.base import TrainingObjective as moved

    assert former is data and TrainingObjective is moved and former.__spec__.name == "autodeuq.table.data"
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert "autodeuq.data moved to autodeuq.table.data: import it from there (the former name will be removed)" \
        in messages


def test_the_package_itself_imports_no_former_name():
    # Every module of the package imported with the former names' warning an error: the modules that still
    # use a former name (the ensemble stage's, for now) are not warned about, and nothing else uses one.
    import subprocess
    import sys
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent / "autodeuq"
    names = sorted({".".join(p.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")
                    for p in package.rglob("*.py") if p.name != "__main__.py" and "ray_reaper" not in p.name})
    code = "import importlib\nfor n in %r: importlib.import_module(n)" % names
    former = "error:autodeuq.:DeprecationWarning"  # the former names' warnings (others are not this test's)
    run = subprocess.run([sys.executable, "-W", former, "-c", code], capture_output=True,
                         text=True, cwd=package.parent, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    run = subprocess.run([sys.executable, "-W", former, "-m", "autodeuq", "--help"],
                         capture_output=True, text=True, cwd=package.parent, timeout=300)
    assert run.returncode == 0 and "usage: autodeuq" in run.stdout, run.stderr[-2000:]


# --------------------------------------------------------------------------- a task
class MaxErrorScores(RegressionScores):
    """The toy task's report: regression's scores and figures, plus the largest absolute error of
    the mixture's mean (``max_abs_error``), in its table too."""

    @staticmethod
    def scores(prediction, y) -> dict:
        scores = RegressionScores.scores(prediction, y)
        error = np.abs(np.asarray(prediction.mean) - y).max(axis=0)
        scores["max_abs_error"] = {"per_target": error.tolist(), "mean": float(error.mean())}
        return scores

    @staticmethod
    def table(metrics_by_split) -> str:
        return RegressionScores.table(metrics_by_split) + "\nmax_abs_error " + " ".join(
            f"{metrics_by_split[s]['max_abs_error']['mean']:.4f}" for s in metrics_by_split)


class MaxErrorRegression(tasks.RegressionTask):
    """A toy task: regression, scored by its largest error besides regression's scores."""

    name = "regression-max-error"
    report = MaxErrorScores


@pytest.fixture
def toy_task(monkeypatch):
    monkeypatch.setitem(tasks.TASKS, MaxErrorRegression.name, MaxErrorRegression)  # the registry line
    return MaxErrorRegression.name


def test_a_task_registered_from_outside_runs_a_search_and_an_ensemble(tmp_path, toy_task):
    import dataclasses
    import json

    from autodeuq.app.options import EnsembleConfig
    from autodeuq.ensemble import Ensemble
    from autodeuq.report import build_and_report

    data = dataclasses.replace(toy_sine(seed=0), task=toy_task)
    config = configure(SearchConfig, **TINY, search="random", early_discarding="none")
    fill_catalog(load_space("toy").for_rows(len(data.x_train)), data, tmp_path / "run", config).raise_for_error()
    with Catalog(tmp_path / "run") as catalog:
        assert catalog.task == toy_task and isinstance(catalog.task_object, MaxErrorRegression)
        assert catalog.prediction_arrays == ("mean", "var")
    report = build_and_report(tmp_path / "run", configure(EnsembleConfig, ensemble_size=2, refit=False,
                                                          crossfit=False, calibrate="none"))
    assert type(report.ensemble) is Ensemble and report.ensemble.selection["selector"] == "greedy"
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    value = written["validation"]["max_abs_error"]["mean"]
    assert np.isfinite(value) and value > 0 and "nll" in written["validation"]
    test = written["test"]["max_abs_error"]["mean"]  # toy-sine keeps a test set
    assert report.table().splitlines()[-1] == f"max_abs_error {value:.4f} {test:.4f}"


def test_a_catalog_of_an_unregistered_task_says_so(tmp_path, toy_task, monkeypatch):
    import dataclasses

    data = dataclasses.replace(toy_sine(seed=0), task=toy_task)
    config = configure(SearchConfig, **{**TINY, "max_evals": 1}, search="random", early_discarding="none")
    fill_catalog(load_space("toy").for_rows(len(data.x_train)), data, tmp_path / "run", config).raise_for_error()
    monkeypatch.delitem(tasks.TASKS, toy_task)
    with Catalog(tmp_path / "run") as catalog, pytest.raises(CatalogError, match="task 'regression-max-error' is not "
                                                                                "registered here"):
        catalog.validation_predictions()


def test_the_built_in_tasks_are_named_in_the_registry():
    assert list(tasks.TASKS) == ["regression", "classification"]
    regression, classification = tasks.get_task("regression"), tasks.get_task("classification")
    assert (regression.head, classification.head) == ("gaussian", "logits")
    assert regression.part("ensemble").__name__ == "Ensemble"
    assert classification.part("ensemble").__name__ == "ClassifierEnsemble"
    assert tasks.get_task(regression) is regression
    with pytest.raises(ParameterError, match="task must be one of the registered tasks"):
        tasks.get_task("quantile")
