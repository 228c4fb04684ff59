"""The TensorFlow environment and the fixtures shared by the test modules.

pytest imports this file before any test module, so the environment below is set before
TensorFlow is first imported and no test module repeats it.
"""
import os

import pytest

# TensorFlow's C++ INFO/WARNING logs would bury pytest's output.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(scope="module")
def ray_local(request):
    """A local Ray instance (2 CPUs) whose workers can unpickle the requesting test module's objects."""
    ray = pytest.importorskip("ray")
    from ray import cloudpickle

    from autodeuq.evaluator.ray import init_ray

    # Ray workers cannot import a test module: its fakes travel by value.
    cloudpickle.register_pickle_by_value(request.module)
    init_ray(num_cpus=2)
    yield ray


def pytest_collection_modifyitems(items):
    """Every test that uses the shared local Ray instance is a ``ray`` test (``-m "not ray"`` runs
    the suite without starting Ray); tests that start Ray otherwise carry the marker themselves."""
    for item in items:
        if "ray_local" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)
