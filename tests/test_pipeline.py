"""One wiring path: the command line and the estimator check their options once (autodeuq.options)
and fill their catalog through pipeline.fill_catalog, before anything starts."""
import numpy as np
import pytest

from autodeuq import pipeline
from autodeuq.catalog import Catalog
from autodeuq.data import toy_sine
from autodeuq.errors import ParameterError
from autodeuq.options import EnsembleConfig, SearchConfig, TableConfig, configure
from autodeuq.space import load_space

BAD_SEARCH_PARAMETERS = [
    ("search", "grid"), ("max_evals", 0), ("max_evals", 2.5), ("max_evals", True), ("epochs", 0), ("seed", -1),
    ("seed", 1.5), ("timeout", 0), ("timeout", "10"), ("eval_timeout", -1.0), ("evaluator", "dask"),
    ("workers", 0), ("cpus_per_eval", 0), ("gpus_per_eval", -1), ("valid_fraction", 0), ("valid_fraction", 1.0),
    ("early_discarding", "hyperband"), ("eval_budget", 0), ("eval_budget", -2.0),
    # bounded above: past these a value fails deep inside (SQLite, Ray) or never ends
    ("seed", 2**32), ("seed", 99999999999999999999999), ("max_evals", 10**7), ("workers", 10**23),
    ("cpus_per_eval", 1e23), ("cpus_per_eval", float("inf")), ("gpus_per_eval", 1e9), ("timeout", float("inf")),
    ("eval_timeout", 1e300), ("epochs", 10**9),
    ("population_size", 1), ("population_size", "big"), ("tournament_size", 0), ("tournament_size", 2.5),
]


@pytest.mark.parametrize("name, value", BAD_SEARCH_PARAMETERS)
def test_a_bad_search_option_is_named(name, value):
    config = TableConfig if name == "valid_fraction" else SearchConfig
    with pytest.raises(ParameterError, match=f"^{name} must ") as caught:
        configure(config, **{name: value})
    assert caught.value.parameter == name and caught.value.value is value


def test_sha_settings_are_checked_whatever_the_discarding():
    with pytest.raises(ParameterError, match="^sha_reduction must be an integer >= 2, got 1"):
        configure(SearchConfig, early_discarding="none", sha_reduction=1)  # unused, yet checked (issue 64)
    with pytest.raises(ParameterError, match='^sha_min_epochs must be "auto" or an integer >= 1, got 0'):
        configure(SearchConfig, sha_min_epochs=0)  # early_discarding "auto" may become "sha"
    with pytest.raises(ParameterError, match="reduction must be an integer >= 2, got 1"):
        configure(SearchConfig, early_discarding="sha", sha_reduction=1)


@pytest.mark.parametrize("name, value", [("ensemble_size", 0), ("selector", "best"), ("selection_score", "crps"),
                                         ("selection_stop", "never"), ("diversity", "colour"),
                                         ("selection_bags", -1), ("calibrate", "isotonic"),
                                         ("selection_bags", 10**23), ("ensemble_size", 10**6),
                                         ("selection_pool", 0), ("selection_pool", 1.5), ("selection_pool", None),
                                         ("selection_pool", "most")])
def test_a_bad_ensemble_option_is_named(name, value):
    with pytest.raises(ParameterError, match=f"^{name} must ") as caught:
        configure(EnsembleConfig, **{name: value})
    assert caught.value.parameter == name


def test_fill_catalog_searches_and_records_its_settings(tmp_path):
    space, data = load_space("toy"), toy_sine(seed=0)
    started = []
    config = configure(SearchConfig, search="random", max_evals=2, epochs=2, seed=3, evaluator="serial",
                       progress=False)
    summary = pipeline.fill_catalog(space, data, tmp_path / "run", config,
                                    on_start=lambda ev: started.append(ev.n_slots))
    assert started == [1]
    assert summary.n_done + summary.n_failed == 2 and not summary.interrupted
    with Catalog(tmp_path / "run") as catalog:
        recorded = catalog.meta["search"]
        assert catalog.n_finished == 2
    assert recorded["search"] == "random" and recorded["epochs"] == 2 and recorded["early_discarding"] is None


def test_an_evaluation_budget_ends_trainings_early_as_done_entries(tmp_path):
    space, data = load_space("toy"), toy_sine(seed=0)
    config = configure(SearchConfig, search="random", max_evals=2, epochs=6, evaluator="serial", eval_budget=1e-9,
                       progress=False)
    summary = pipeline.fill_catalog(space, data, tmp_path / "run", config)
    assert summary.n_done == summary.n_out_of_time == 2 and str(summary).startswith(
        "2 done (2 ended by the evaluation budget), 0 failed")
    with Catalog(tmp_path / "run") as catalog:
        entries = [catalog.entry(i) for i in catalog.to_dataframe()["id"]]
        assert catalog.meta["search"]["eval_budget"] == 1e-9 and catalog.n_out_of_time == 2
    # one epoch fits in no budget at all, but every training runs one and keeps it
    assert [(e["status"], e["epochs"], e["extra"]["out_of_time"]) for e in entries] == [("done", 1, True)] * 2


def test_fill_catalog_refuses_a_setting_the_space_refuses_before_creating_anything(tmp_path):
    config = configure(SearchConfig, search="age-fixed-hp", fixed_hp={"lr": 0.1}, evaluator="serial")
    with pytest.raises(ParameterError, match="^fixed_hp does not fit the space: .*'lr'"):
        pipeline.fill_catalog(load_space("toy"), toy_sine(seed=0), tmp_path / "run", config)
    assert not (tmp_path / "run").exists()


class Planted(Exception):
    pass


def test_cli_and_estimator_share_the_wiring(tmp_path, monkeypatch):
    """Both front ends reach fill_catalog with the same configuration for the same settings."""
    import dataclasses

    from autodeuq import AutoDEUQRegressor, cli

    calls = []

    def recorder(space, dataset, run_dir, config, **settings):
        calls.append(dataclasses.replace(config, run_dir=None))
        raise Planted()

    monkeypatch.setattr(pipeline, "fill_catalog", recorder)
    with pytest.raises(Planted):
        cli.cmd_search(cli.build_parser().parse_args(
            ["search", "--dataset", "toy-sine", "--search", "random", "--max-evals", "7", "--epochs", "3",
             "--seed", "2", "--evaluator", "serial", "--early-discarding", "sha", "--run-dir", str(tmp_path / "a")]))
    X = np.random.default_rng(0).normal(size=(30, 1))
    with pytest.raises(Planted):
        AutoDEUQRegressor(space="toy", search="random", max_evals=7, epochs=3, seed=2, evaluator="serial",
                          early_discarding="sha", run_dir=tmp_path / "b").fit(X, X[:, 0])
    expected = configure(SearchConfig, space="toy", search="random", max_evals=7, epochs=3, seed=2,
                         evaluator="serial", early_discarding="sha")
    assert calls == [expected, expected]


def test_search_timeout_keeps_a_share_for_the_ensemble_step():
    assert pipeline.search_timeout(None) is None
    assert pipeline.search_timeout(1000.0) == 900.0  # a tenth
    assert pipeline.search_timeout(100.0) == 70.0  # at least 30 s
    assert pipeline.search_timeout(10_000.0) == 9_700.0  # at most 5 min
    assert pipeline.search_timeout(20.0) == 10.0  # never more than half


def test_a_whole_run_budget_leaves_time_for_the_ensemble(tmp_path, monkeypatch):
    """`run --timeout` and `fit(timeout=)` bound search and ensemble; `search --timeout` the search alone."""
    from autodeuq import AutoDEUQRegressor, cli

    timeouts = []

    def recorder(space, dataset, run_dir, config, *, timeout, **settings):
        timeouts.append(timeout)
        raise Planted()

    monkeypatch.setattr(pipeline, "fill_catalog", recorder)
    for command, handler in (("search", cli.cmd_search), ("run", cli.cmd_run)):
        with pytest.raises(Planted):
            handler(cli.build_parser().parse_args([command, "--dataset", "toy-sine", "--timeout", "600",
                                                   "--evaluator", "serial", "--run-dir", str(tmp_path / command)]))
    X = np.random.default_rng(0).normal(size=(30, 1))
    with pytest.raises(Planted):
        AutoDEUQRegressor(space="toy", timeout=600, evaluator="serial", run_dir=tmp_path / "fit").fit(X, X[:, 0])
    assert timeouts == [600.0, 540.0, 540.0]


def test_a_resumed_search_reads_its_run_directory_once_then_opens_it_once_to_write(tmp_path, monkeypatch):
    from autodeuq.catalog import Catalog as CatalogClass

    space, data = load_space("toy"), toy_sine(seed=0)
    config = configure(SearchConfig, search="random", max_evals=2, epochs=2, evaluator="serial", progress=False)
    pipeline.fill_catalog(space, data, tmp_path / "run", config)
    reads, writes = [], []
    original_init, original_open = CatalogClass.__init__, CatalogClass.create_or_resume.__func__

    def counting_init(self, run_dir):
        reads.append(run_dir)
        original_init(self, run_dir)

    def counting_open(cls, *args, **kwargs):
        writes.append(args[0])
        return original_open(cls, *args, **kwargs)

    monkeypatch.setattr(CatalogClass, "__init__", counting_init)
    monkeypatch.setattr(CatalogClass, "create_or_resume", classmethod(counting_open))
    summary = pipeline.fill_catalog(space, data, tmp_path / "run",
                                    configure(SearchConfig, search="random", max_evals=3, epochs=2,
                                              evaluator="serial", progress=False))
    assert summary.n_done + summary.n_failed == 3
    assert len(reads) == 1 and len(writes) == 1
