"""One option table (autodeuq.options.OPTIONS): both front ends are generated from it, and every
value is checked once, with the same rules, whichever front end received it."""
import argparse
import inspect
import warnings

import pytest

from autodeuq import AutoDEUQRegressor, cli
from autodeuq.errors import ParameterError, ParameterWarning
from autodeuq.options import (
    BY_NAME,
    OPTIONS,
    EnsembleConfig,
    SearchConfig,
    TableConfig,
    configure,
    flag,
    given,
    resolve,
)


def _actions(command):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices[command]._actions if a.option_strings and a.dest != "help"]


def test_every_option_has_its_cli_flag_and_its_estimator_parameter():
    run = {a.dest: a for a in _actions("run")}
    parameters = inspect.signature(AutoDEUQRegressor.__init__).parameters
    for o in OPTIONS:
        assert o.name in run and o.cli_flag in run[o.name].option_strings, o.name
        assert parameters[o.name].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[o.name].default == o.default or o.default != o.default, o.name
        assert getattr(AutoDEUQRegressor(), o.name) == o.default
        assert f"\n    {o.name} : " in AutoDEUQRegressor.__doc__  # documented from the same table
    assert set(parameters) - {"self"} == set(BY_NAME)


@pytest.mark.parametrize("command", ["search", "ensemble", "run"])
def test_every_cli_option_is_an_option_of_a_run_or_a_stated_input(command):
    for action in _actions(command):
        if action.dest in BY_NAME:
            assert flag(action.dest) in action.option_strings
        else:  # the data and the outputs: fit's arguments, or a method of the fitted estimator
            assert set(action.option_strings) <= set(cli.INPUTS), action.option_strings


def test_cli_defaults_come_from_the_table_alone():
    args = cli.build_parser().parse_args(["run", "--dataset", "toy-sine", "--max-evals", "7", "--no-refit"])
    assert given(args) == {"max_evals": 7, "refit": False}
    table, search, ensemble = resolve(given(args))
    assert search.max_evals == 7 and search.search == BY_NAME["search"].default and ensemble.refit is False
    assert table == TableConfig() and ensemble.ensemble_size == BY_NAME["ensemble_size"].default


def test_a_value_is_checked_once_with_the_same_message_for_both_front_ends(capsys):
    with pytest.raises(ParameterError) as caught:
        configure(SearchConfig, max_evals=0)
    assert str(caught.value) == "max_evals must be an integer >= 1, got 0"
    assert cli.main(["search", "--dataset", "toy-sine", "--max-evals", "0"]) == 2
    assert capsys.readouterr().err.strip() == "autodeuq: error: --max-evals must be an integer >= 1, got 0"


def test_an_option_that_does_not_apply_is_refused_or_ignored_as_declared(capsys):
    with pytest.raises(ParameterError, match=r"^surrogate applies to the BO-based searchers \(.*\), not to search age"):
        configure(SearchConfig, search="age", surrogate="rf")
    assert cli.main(["search", "--dataset", "toy-sine", "--search", "age", "--surrogate", "rf"]) == 2
    err = capsys.readouterr().err  # the options named as options
    assert "--surrogate applies to the BO-based searchers" in err and "not to --search age, got 'rf'" in err
    with pytest.warns(ParameterWarning, match=r"^sha_reduction applies to early_discarding auto or sha, not to "
                                              r"early_discarding none: 4 is ignored$"):
        configure(SearchConfig, early_discarding="none", sha_reduction=4)  # successive halving's: unused, said
    with pytest.raises(ParameterError, match="^sha_reduction must be an integer >= 2"):
        configure(SearchConfig, early_discarding="sha", sha_reduction=1)


@pytest.mark.parametrize("name, value, requirement", [
    ("iepoch_epochs", 0, "must be an integer >= 1"),
    ("iepoch_top_k", -1, "must be an integer >= 1"),
    ("sha_reduction", 1, "must be an integer >= 2"),
    ("discard_budget", -5.0, "must be > 0"),
])
def test_every_value_is_checked_whether_or_not_its_option_applies(capsys, name, value, requirement):
    discarding = "none" if name != "iepoch_top_k" else "sha"  # the option unused either way
    with pytest.raises(ParameterError, match=f"^{name} {requirement}, got {value}"):
        configure(SearchConfig, early_discarding=discarding, **{name: value})
    argv = ["search", "--dataset", "toy-sine", "--early-discarding", discarding, flag(name), str(value)]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.startswith(f"autodeuq: error: {flag(name)} {requirement}, got ")


def test_an_ignored_value_is_said_in_the_options_of_each_front_end(capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        configure(SearchConfig, iepoch_epochs=3, iepoch_top_k=10)  # the default top-k is no choice: not said
    assert [str(w.message) for w in caught] == [
        "iepoch_epochs applies to early_discarding iepoch, not to early_discarding auto: 3 is ignored"]
    assert isinstance(caught[0].message, ParameterWarning) and caught[0].filename == __file__  # the caller's line
    with pytest.warns(ParameterWarning, match=r"^workers applies to evaluator ray, not to evaluator serial: 3 is "
                                              r"ignored$"):
        configure(SearchConfig, evaluator="serial", workers=3)
    # The command line names the options by their flags (the run then stops on its two datasets).
    assert cli.main(["search", "--dataset", "toy-sine", "--data", "t.csv", "--iepoch-epochs", "3"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("autodeuq: warning: --iepoch-epochs applies to --early-discarding iepoch, not to "
                      "--early-discarding auto: 3 is ignored")


def test_unknown_and_misplaced_options_are_refused():
    with pytest.raises(ParameterError, match="^verbose is not an option of autodeuq"):
        resolve({"verbose": True})
    with pytest.raises(ParameterError, match="^max_evals is not an option of EnsembleConfig"):
        configure(EnsembleConfig, max_evals=3)


def test_a_config_is_immutable_and_typed_by_group():
    config = configure(SearchConfig, workers=2)
    with pytest.raises(AttributeError):
        config.workers = 3
    assert set(SearchConfig.__dataclass_fields__) == {o.name for o in OPTIONS if o.group in ("search", "evaluation")}
    assert set(EnsembleConfig.__dataclass_fields__) == {o.name for o in OPTIONS if o.group == "ensemble"}
