"""The top-level package: lazy API, discoverable by completion."""
import autodeuq


def test_dir_lists_the_lazy_api_and_everything_listed_resolves():
    names = dir(autodeuq)
    for name in ("AutoDEUQRegressor", "Catalog", "Ensemble", "load_ensemble", "metrics", "ensemble", "__version__"):
        assert name in names
    for name in autodeuq.__all__:
        assert getattr(autodeuq, name) is not None


def test_import_asks_tensorflow_for_gpu_memory_growth_unless_the_user_chose():
    import os
    import subprocess
    import sys

    show = "import os, autodeuq; print(os.environ['TF_FORCE_GPU_ALLOW_GROWTH'])"
    environment = {k: v for k, v in os.environ.items() if k != "TF_FORCE_GPU_ALLOW_GROWTH"}
    for chosen, expected in ((None, "true"), ("false", "false")):
        env = environment if chosen is None else {**environment, "TF_FORCE_GPU_ALLOW_GROWTH": chosen}
        out = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expected
