"""The command line's choice lists are the registries' names, and reading them imports none of
the heavy libraries (``autodeuq --help`` stays fast)."""
import subprocess
import sys

import pytest

from autodeuq import discard, evaluator, search
from autodeuq.cli import build_parser, main
from autodeuq.data import BUILTIN_DATASETS
from autodeuq.ensemble import options
from autodeuq.labels import TASKS
from autodeuq.preprocess import CATEGORICAL, IMPUTE


def _choices(command):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {a.dest: list(a.choices) for a in sub._actions if a.choices is not None}


def test_every_choice_list_is_its_registry():
    expected = {
        "dataset": list(BUILTIN_DATASETS), "categorical": list(CATEGORICAL), "impute": list(IMPUTE),
        "search": list(search.SEARCHERS) + list(search.ABLATIONS), "surrogate": list(search.SURROGATES),
        "acq": list(search.ACQUISITIONS), "early_discarding": list(discard.POLICIES),
        "sha_rungs": list(discard.RUNG_UNITS),
        "evaluator": list(evaluator.EVALUATORS), "selector": list(options.SELECTORS),
        "selection_score": list(options.SCORES),
        "selection_stop": list(options.STOPS), "diversity": list(options.DIVERSITY),
        "calibrate": list(options.CALIBRATIONS), "task": list(TASKS),
    }
    assert _choices("run") == expected
    assert _choices("search") == {k: v for k, v in expected.items() if k not in (
        "selector", "selection_score", "selection_stop", "diversity", "calibrate")}


def test_the_bo_searchers_are_those_whose_class_takes_a_surrogate():
    takes = {name for name in search.SEARCHERS if search.SEARCHERS[name].takes_surrogate}
    assert takes == {"bo", "agebo"}
    assert set(search.surrogate_searchers()) == takes | {"bo-fixed-arch"}
    surrogate = next(a for a in build_parser()._subparsers._group_actions[0].choices["search"]._actions
                     if a.dest == "surrogate")
    assert "(bo, agebo, bo-fixed-arch)" in surrogate.help


def test_a_surrogate_for_a_searcher_without_bo_is_refused(capsys):
    assert main(["search", "--dataset", "toy-sine", "--search", "age", "--surrogate", "rf"]) == 2
    assert "--surrogate applies to the BO-based searchers (bo, agebo, bo-fixed-arch)" in capsys.readouterr().err


def test_registries_resolve_their_names():
    from autodeuq.search.acquisition import lcb
    from autodeuq.search.age import AgingEvolution
    from autodeuq.search.surrogate import ExtraTreesSurrogate

    assert search.SEARCHERS["age"] is AgingEvolution and search.ACQUISITIONS["lcb"] is lcb
    assert isinstance(search.SURROGATES["et"](0), ExtraTreesSurrogate)


HEAVY = ("tensorflow", "keras", "ray", "sklearn", "scipy", "pandas", "ConfigSpace")


@pytest.mark.parametrize("argv", [["--help"], ["search", "--help"], ["run", "--help"]])
def test_help_imports_no_heavy_library(argv):
    code = ("import runpy, sys\n"
            f"sys.argv = ['autodeuq', *{argv!r}]\n"
            "try:\n    runpy.run_module('autodeuq', run_name='__main__')\n"
            "except SystemExit as exit:\n    assert exit.code == 0, exit.code\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
