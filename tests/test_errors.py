"""One error root: every error autodeuq raises on purpose is an AutoDEUQError; the CLI prints those
as one line (options named its way) and anything else as a bug, with its traceback."""
import ast
import pickle
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import autodeuq
from autodeuq import cli
from autodeuq.errors import AutoDEUQError, ParameterError

PACKAGE = Path(autodeuq.__file__).parent


def _error_classes():
    from autodeuq.catalog import CatalogError
    from autodeuq.data import DataError
    from autodeuq.ensemble.predictive import EnsembleError, ManifestError
    from autodeuq.evaluator.ray import RayConnectionError
    from autodeuq.fileio import WriteError
    from autodeuq.runner import SearchError
    from autodeuq.space import SpaceError

    # each keeps the built-in base that callers caught before the root existed
    return [(DataError, ValueError), (SpaceError, ValueError), (CatalogError, RuntimeError),
            (RayConnectionError, RuntimeError), (SearchError, RuntimeError), (ManifestError, ValueError),
            (EnsembleError, ValueError), (ParameterError, ValueError), (ParameterError, TypeError),
            (WriteError, RuntimeError), (cli.CLIError, Exception)]


def test_every_error_has_the_root_and_its_former_base():
    for cls, base in _error_classes():
        assert issubclass(cls, AutoDEUQError) and issubclass(cls, base), cls
        with pytest.raises(base):
            raise (cls("p", "must be x", 0) if cls is ParameterError else cls("x"))


def test_the_root_is_exported_and_dependency_free():
    assert autodeuq.AutoDEUQError is AutoDEUQError and autodeuq.ParameterError is ParameterError
    assert {"AutoDEUQError", "ParameterError", "SearchError"} <= set(autodeuq.__all__) <= set(dir(autodeuq))
    # autodeuq.core.quiet and autodeuq._lazy (standard library only) are loaded by the package itself:
    # the first before TensorFlow can be imported, the second for the names it loads on first use and
    # the former module names (autodeuq.errors is autodeuq.core.errors).
    loaded = ('autodeuq.errors', 'autodeuq.core', 'autodeuq.core.errors', 'autodeuq.core.quiet', 'autodeuq._lazy')
    code = ("import sys, autodeuq.errors; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'tensorflow', 'ray', 'ConfigSpace')"
            f" or (m.startswith('autodeuq.') and m not in {loaded!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_errors_pickle_with_their_parameters():
    from autodeuq.catalog import CatalogError

    error = pickle.loads(pickle.dumps(CatalogError("r: use a new run directory", parameters=("run_dir",))))
    assert str(error) == "r: use a new run directory" and error.parameters == ("run_dir",)
    error = pickle.loads(pickle.dumps(ParameterError("max_evals", "must be an integer >= 1", 0)))
    assert (error.parameter, error.requirement, error.value) == ("max_evals", "must be an integer >= 1", 0)
    assert str(error) == "max_evals must be an integer >= 1, got 0" and error.parameters == ("max_evals",)


def _raised_strings(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            for sub in ast.walk(node.exc):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    yield node.lineno, sub.value


def test_library_messages_name_no_command_line_option():
    # `ray start --head` is Ray's command, not ours
    option = re.compile(r"(?<![\w-])--(?!head\b)[a-z][a-z-]+")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "cli.py":
            continue
        for line, text in _raised_strings(ast.parse(path.read_text())):
            if option.search(text):
                found.append(f"{path.relative_to(PACKAGE)}:{line}: {text}")
    assert not found, found


def test_error_line_names_options_and_adds_the_hint():
    assert cli.error_line(ParameterError("max_evals", "must be an integer >= 1", 0)) == \
        "--max-evals must be an integer >= 1, got 0"
    assert cli.error_line(ParameterError("timeout", "must be > 0", -3.0)) == "--timeout must be > 0, got -3"
    assert cli.error_line(ParameterError("min_epochs", "must be an integer >= 1", 0)).startswith("--sha-min-epochs ")
    assert cli.error_line(AutoDEUQError("r: use a new run directory\nmore", parameters=("epochs", "run_dir"))) == \
        "r: use a new run directory (--epochs, --run-dir)"
    assert cli.error_line(AutoDEUQError("plain")) == "plain"


def test_cli_error_with_a_hint_is_one_line(tmp_path, capsys):
    taken = tmp_path / "file"
    taken.write_text("not a run directory")
    code = cli.main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "1", "--epochs", "1",
                     "--run-dir", str(taken), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"autodeuq: error: {taken}: exists and is not a directory; use a new run directory "
                          f"(--run-dir)"), err


def test_cli_parameter_errors_name_the_option_before_anything_runs(tmp_path, capsys):
    run = tmp_path / "run"
    base = ["search", "--dataset", "toy-sine", "--evaluator", "serial", "--run-dir", str(run), "--no-progress"]
    for extra, expected in ((["--max-evals", "0"], "--max-evals must be an integer >= 1, got 0"),
                            (["--epochs", "0"], "--epochs must be an integer >= 1, got 0"),
                            (["--valid-fraction", "1.5"], "--valid-fraction must be a number strictly between 0 and 1"),
                            (["--early-discarding", "sha", "--sha-min-epochs", "0"], "--sha-min-epochs must be"),
                            (["--workers", "0"], "--workers must be an integer >= 1, got 0"),
                            (["--seed", "99999999999999999999999"], "--seed must be an integer <= 4294967295"),
                            (["--cpus-per-eval", "1e400"], "--cpus-per-eval must be a finite number <= 4096, got inf"),
                            (["--cpus-per-eval", "1e23"], "--cpus-per-eval must be a finite number <= 4096"),
                            (["--workers", "100000000000000000000000"], "--workers must be an integer <= 100000"),
                            (["--timeout", "nan"], "--timeout must be > 0, got nan"),
                            (["--eval-timeout", "inf"], "--eval-timeout must be a finite number"),
                            (["--selection-bags", "100000000000000000000000"], None)):
        if expected is None:  # an ensemble option: `run` checks it before the search
            code = cli.main(["run"] + base[1:] + extra)
            expected = "--selection-bags must be an integer <= 10000"
        else:
            code = cli.main(base + extra)
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(f"autodeuq: error: {expected}") and err.count("\n") == 1, (extra, err)
    assert not run.exists()


@pytest.mark.parametrize("extra", [["--max-evals", "nan"], ["--workers", "1e23"], ["--seed", "x"], ["--bogus"]])
def test_argparse_usage_errors_are_one_line(capsys, extra):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["search", "--dataset", "toy-sine"] + extra)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "usage:" not in err, err
    assert re.fullmatch(r"autodeuq( search)?: error: .+ \(see: autodeuq( search)? --help\)\n", err), err


@pytest.mark.parametrize("bug", [ZeroDivisionError("division by zero"), ValueError("a numpy shape mismatch")])
def test_an_unexpected_exception_shows_its_traceback_and_asks_for_a_report(monkeypatch, capsys, bug):
    def broken(args):
        raise bug

    monkeypatch.setattr(cli, "cmd_catalog", broken)
    assert cli.main(["catalog", "--run-dir", "anywhere"]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and f"{type(bug).__name__}: {bug}" in err
    assert err.strip().splitlines()[-1] == ("autodeuq: internal error: this is a bug in autodeuq; please report it "
                                            "with the traceback above")


def test_search_error_exits_1_and_other_errors_2(monkeypatch, capsys):
    from autodeuq.catalog import CatalogError
    from autodeuq.runner import SearchError

    for error, code in ((SearchError("all 3 evaluations failed"), 1), (CatalogError("broken catalog"), 2)):
        def failing(args, error=error):
            raise error

        monkeypatch.setattr(cli, "cmd_catalog", failing)
        assert cli.main(["catalog", "--run-dir", "anywhere"]) == code
        assert capsys.readouterr().err == f"autodeuq: error: {error}\n"


def test_autodeuq_warnings_are_one_line_each_on_the_command_line(monkeypatch, capsys):
    from autodeuq.errors import AutoDEUQWarning, CatalogWarning

    def warns(args):
        for _ in range(2):  # the same place twice: shown twice
            warnings.warn("skipped 2 catalog entries: entry 3: missing", CatalogWarning, stacklevel=2)

    monkeypatch.setattr(cli, "cmd_catalog", warns)
    assert cli.main(["catalog", "--run-dir", "anywhere"]) == 0
    assert capsys.readouterr().err == "autodeuq: warning: skipped 2 catalog entries: entry 3: missing\n" * 2
    assert issubclass(CatalogWarning, RuntimeWarning) and issubclass(CatalogWarning, AutoDEUQWarning)
    from autodeuq.ensemble.building import EnsembleSizeWarning
    from autodeuq.ensemble.refit import RefitTimeWarning
    from autodeuq.evaluator.ray import ConcurrencyWarning

    assert all(issubclass(w, AutoDEUQWarning) for w in (EnsembleSizeWarning, RefitTimeWarning, ConcurrencyWarning))


# What ray.init (Ray 2.60) raised when a cluster with token authentication refused a driver without
# the cluster's token: "Failed to connect to Ray cluster", the reason only in the exception it chains.
RAY_REFUSAL = (
    'Failed to connect to GCS. Last connection error: Traceback (most recent call last):\n'
    '  File "ray/_private/node.py", line 996, in _init_gcs_client\n    client = GcsClient(\n'
    '  File "python/ray/includes/common.pxi", line 119, in ray._raylet.check_status\n'
    "ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: Authentication token is missing or "
    "incorrect. Note: RAY_AUTH_MODE is currently 'disabled' (not 'token'). Ensure that the token for the cluster "
    "is available in a local file (e.g., ~/.ray/auth_token or via RAY_AUTH_TOKEN_PATH) or as the `RAY_AUTH_TOKEN` "
    "environment variable.\n")
NO_TOKEN = ("Token authentication is enabled but no authentication token was found. Ensure that the token for the "
            "cluster is available in a local file (e.g., ~/.ray/auth_token or via RAY_AUTH_TOKEN_PATH) or as the "
            "`RAY_AUTH_TOKEN` environment variable.")


def _ray_failing_with(make):
    class FakeRay:
        @staticmethod
        def init(address, **kwargs):
            raise make()

    return FakeRay


def _refused():
    try:
        raise RuntimeError(RAY_REFUSAL)
    except RuntimeError as exc:
        raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379") from exc


@pytest.mark.parametrize("environ, sent", [
    ({}, "this process has RAY_AUTH_MODE unset, so it sent no token"),
    ({"RAY_AUTH_MODE": "disabled"}, "this process has RAY_AUTH_MODE 'disabled', so it sent no token"),
    ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "stale"},
     "the token this process sent (from RAY_AUTH_TOKEN) is not the cluster's"),
    ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/etc/ray-token"},
     "the token this process sent (from the file /etc/ray-token) is not the cluster's"),
])
def test_a_connection_refused_by_token_authentication_says_why_and_what_to_do(monkeypatch, environ, sent):
    from autodeuq.evaluator.ray import RayConnectionError, _init

    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RayConnectionError) as info:
        _init(_ray_failing_with(_refused), "10.0.0.5:6379", {}, "connect to Ray at '10.0.0.5:6379'")
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith("cannot connect to Ray at '10.0.0.5:6379': Failed to connect to Ray cluster at "
                           "10.0.0.5:6379: the cluster refused it (RPC error: InvalidAuthToken: Authentication token "
                           "is missing or incorrect); the cluster uses token authentication"), line
    assert sent in line
    assert line.endswith(": run with RAY_AUTH_MODE=token and the cluster's token (the head's ~/.ray/auth_token) in "
                         "RAY_AUTH_TOKEN, in ~/.ray/auth_token or in the file RAY_AUTH_TOKEN_PATH names; or start the "
                         "cluster with authentication disabled (RAY_AUTH_MODE=disabled ray start --head).")


def test_a_missing_token_and_other_connection_failures_are_one_line(monkeypatch):
    from autodeuq.evaluator.ray import RayConnectionError, _init

    class AuthenticationError(RuntimeError):
        pass

    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    with pytest.raises(RayConnectionError) as info:
        _init(_ray_failing_with(lambda: AuthenticationError(NO_TOKEN)), "h:1", {}, "connect to Ray at 'h:1'")
    assert str(info.value).startswith("cannot connect to Ray at 'h:1': Token authentication is enabled but no "
                                      "authentication token was found; the cluster uses token authentication")
    assert "this process has RAY_AUTH_MODE=token but found no token: run with RAY_AUTH_MODE=token" in str(info.value)
    with pytest.raises(RayConnectionError) as info:  # no authentication in the chain: no advice about it
        _init(_ray_failing_with(lambda: ConnectionError("Failed to connect to Ray cluster at h:1")), "h:1", {},
              "connect to Ray at 'h:1'")
    assert str(info.value) == "cannot connect to Ray at 'h:1': Failed to connect to Ray cluster at h:1."
