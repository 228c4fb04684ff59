"""The top-level package: lazy API, discoverable by completion."""
import autodeuq


def test_dir_lists_the_lazy_api_and_everything_listed_resolves():
    names = dir(autodeuq)
    for name in ("AutoDEUQRegressor", "Catalog", "Ensemble", "load_ensemble", "metrics", "ensemble", "__version__"):
        assert name in names
    for name in autodeuq.__all__:
        assert getattr(autodeuq, name) is not None
