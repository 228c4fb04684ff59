"""benchmarks/supernet_probe.py: the supernet computes what the plan's program computes, and one
trace trains several networks."""
import numpy as np
import tensorflow as tf

from autodeuq.plan import NetworkPlan, NetworkProgram
from autodeuq.space import load_space
from autodeuq.train import CompiledTrainer, _graph_optimizer_off
from benchmarks.supernet_probe import Supernet, SupernetTrainer, check, glorot_kernels

# float32 on both sides, the same kernels but sums possibly grouped otherwise: a few roundings,
# relative to the largest magnitude
TOLERANCE = 1e-5


def test_outputs_and_gradients_are_the_plan_programs():
    assert check(load_space("toy"), 1, networks=12) <= TOLERANCE
    assert check(load_space("tabular"), 13, networks=4, seed=1) <= TOLERANCE


def test_one_trace_trains_networks_of_several_shapes_as_their_own_traces_do():
    space, rng = load_space("toy"), np.random.default_rng(3)
    x, y = rng.normal(size=(40, 1)).astype(np.float32), rng.normal(size=(40, 1)).astype(np.float32)
    tensors = [tf.constant(a) for a in (x[:30], y[:30], x[30:], y[30:])] + [tf.constant(8)]
    shared = SupernetTrainer(Supernet(space, 1, 1), "rmsprop")
    archs = [space.sample_arch(np.random.default_rng(seed)) for seed in (0, 1)]
    assert NetworkPlan.from_arch(space, archs[0], 1, 1).key != NetworkPlan.from_arch(space, archs[1], 1, 1).key
    with _graph_optimizer_off():
        for seed, arch in enumerate(archs):
            network_plan = NetworkPlan.from_arch(space, arch, 1, 1)
            model = network_plan.build_model()
            glorot_kernels(model, seed)
            own = CompiledTrainer(NetworkProgram(network_plan), "rmsprop")
            own.reset([v.value.numpy() for v in model.trainable_variables], 1e-2, seed)
            shared.load(space, arch)
            shared.reset(shared.program.to_flat(model, shared.shapes), 1e-2, seed)
            for _ in range(3):
                expected, got = own.run_epoch(*tensors)[0].numpy(), shared.run_epoch(*tensors)[0].numpy()
                np.testing.assert_allclose(got, expected, rtol=TOLERANCE)
    assert shared.traces == 1
