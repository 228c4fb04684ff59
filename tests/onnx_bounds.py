"""How far an ONNX graph's float32 networks may be from the float64 reference: a bound per value.

The ONNX file computes each member's network in float32 (its standardization, the conversion back
and the mixture in float64); the TensorFlow path, the reference, computes everything in float64
from the same float32 weights. The difference is float32 rounding, bounded here per row and per
output, to first order, as the sum of two parts:

* **rounding of sums and products** (matrix products, sums, batch normalization, the casts):
  modelled as independent, mean-zero errors of at most ``u = 2**-24`` relative (Higham & Mary
  2019, "A new approach to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5)).
  An inner product of length ``n`` plus a bias has errors of scale ``sqrt(n + 1) u (|x|.|w| +
  |b|)`` whatever the order of its additions; each reaches an output through the network's
  derivative ``g`` (taken by ``tf.GradientTape`` on the float64 network, with a zero perturbation
  added at every value). By Hoeffding's inequality the output's error exceeds
  ``LAMBDA * sqrt(sum (g r)**2)`` with probability below ``2 exp(-LAMBDA**2 / 2)`` (1e-13 for
  LAMBDA = 8), over all the ways the additions may be ordered, vectorized or fused.
* **elementary functions** (exp, tanh, logistic, erf, softplus...): not random, so added
  linearly, ``sum |g| r`` with ``r = ACTIVATION_ULPS u (|f| + 1)`` (ONNX Runtime's vectorized
  functions are accurate to a few units in the last place).

Neither part depends on the order of the operations, the vector width, fused multiply-adds or the
number of threads: the reason the tolerance holds on any CPU. The deterministic worst case
(Higham 2002, Theorem 3.5, chained through ``|W|``) was measured too loose to test anything: 17
times the outputs' scale for a 5-cell tabular network. The mixture's outputs carry the members'
bounds through their formulas (first order, times :data:`SLACK`), plus ``FLOAT64_RELATIVE`` of
each value for the reference's own float64 rounding.
"""
from __future__ import annotations

import numpy as np

U = 2.0 ** -24
LAMBDA = 8.0
ACTIVATION_ULPS = 16
SLACK = 1.5
FLOAT64_RELATIVE = 1e-12


class _Tape:
    """Values with a zero perturbation each (whose gradient is the output's derivative w.r.t. the
    value) and the scale of their float32 rounding, random or not."""

    def __init__(self, tape):
        self.tape, self.points = tape, []

    def value(self, v, random=None, fixed=None):
        import tensorflow as tf

        p = tf.zeros_like(v)
        self.tape.watch(p)
        self.points.append((p, random, fixed))
        return v + p


def network_bound(plan, weights, state, scaler, x, classifier: bool):
    """``[(value, bound), ...]`` of a member on encoded inputs ``x`` (float64): ``(mean, var)`` in
    original units, or ``(logits,)``, each ``(n, outputs)``."""
    import tensorflow as tf

    from autodeuq import ops
    from autodeuq.plan import INPUT_NAME

    def mag(v):
        return tf.abs(v)

    z = tf.constant((x - np.asarray(scaler.x_mean, float)) / np.asarray(scaler.x_std, float), tf.float64)
    with tf.GradientTape(persistent=True) as gt:
        tape = _Tape(gt)
        values = {INPUT_NAME: tape.value(z, random=U * mag(z))}
        weights, state = list(weights), list(state)
        for op, weight_shapes, state_shapes in plan.op_shapes():
            own = [tf.constant(np.asarray(a, np.float64)) for a in weights[:len(weight_shapes)]]
            own_state = [np.asarray(a, np.float64) for a in state[:len(state_shapes)]]
            weights, state = weights[len(weight_shapes):], state[len(state_shapes):]
            inputs = [values[i] for i in op.inputs]
            if isinstance(op, ops.Dense):
                kernel, bias = own
                n = int(kernel.shape[0])
                s = tape.value(inputs[0] @ kernel + bias,
                               random=np.sqrt(n + 1) * U * (mag(inputs[0]) @ mag(kernel) + mag(bias)))
                out = _activate(tape, op.activation, s)
            elif isinstance(op, ops.Add):
                total = tf.add_n(inputs)
                out = tape.value(total, random=np.sqrt(len(inputs)) * U * tf.add_n([mag(v) for v in inputs]))
            elif isinstance(op, ops.Activation):
                out = _activate(tape, op.activation, inputs[0])
            elif isinstance(op, ops.Dropout):
                out = inputs[0]
            elif isinstance(op, ops.BatchNormalization):
                (g, b), (m, var) = [a.numpy() for a in own], own_state
                scale = g / np.sqrt(var + op.epsilon)
                shift = b - m * scale
                # the constants rounded to float32 (fixed), the product and the sum (random)
                size = mag(inputs[0] * scale) + np.abs(shift)
                out = tape.value(inputs[0] * scale + shift, random=np.sqrt(2) * U * size, fixed=U * size)
            elif isinstance(op, ops.GaussianHead):
                t = op.n_targets
                sp = tf.nn.softplus(inputs[0][:, t:])
                var_value = tape.value(sp + op.floor, random=U * (sp + op.floor),
                                       fixed=ACTIVATION_ULPS * U * (sp + 1.0))
                out = (inputs[0][:, :t], var_value)
            else:
                raise AssertionError(op)
            values[op.name] = out
        out = values[plan.ops[-1].name]
        outputs = [out] if classifier else list(out)
        outputs = [tape.value(v, random=U * mag(v)) for v in outputs]  # the outputs' cast to float64
        targets = [[tf.reduce_sum(v[:, j]) for j in range(v.shape[1])] for v in outputs]  # rows do not mix
    result = []
    for v, sums in zip(outputs, targets):
        bound = np.zeros(v.shape)
        for j, target in enumerate(sums):
            grads = gt.gradient(target, [p for p, _, _ in tape.points])
            random, fixed = np.zeros(len(x)), np.zeros(len(x))
            for g, (_, r, f) in zip(grads, tape.points):
                if g is not None and r is not None:
                    random += tf.reduce_sum((g * r) ** 2, axis=1).numpy()
                if g is not None and f is not None:
                    fixed += tf.reduce_sum(tf.abs(g) * f, axis=1).numpy()
            bound[:, j] = LAMBDA * np.sqrt(random) + fixed
        result.append((v.numpy(), bound))
    if classifier:
        return result
    (mean, e_mean), (var, e_var) = result
    y_mean, y_std = np.asarray(scaler.y_mean, float), np.asarray(scaler.y_std, float)
    return [(mean * y_std + y_mean, e_mean * y_std), (var * y_std ** 2, e_var * y_std ** 2)]


def _activate(tape, activation, s):
    if activation.name == "linear":
        return s
    a = activation.forward(s)
    return tape.value(a, fixed=ACTIVATION_ULPS * U * (abs(a) + 1.0))


def _sqrt_bound(v, e):
    """A bound of ``|sqrt(v + d) - sqrt(v)|`` for ``|d| <= e``."""
    with np.errstate(divide="ignore"):
        return np.minimum(np.sqrt(e), np.where(v > 0, e / np.sqrt(np.maximum(v, 1e-300)), np.inf))


def regression_bounds(means, e_means, variances, e_vars, weights, scale=None):
    """Bounds of the mixture's ``mean``, ``std``, ``aleatoric_std``, ``epistemic_std`` (each
    ``(n, T)``) from the members' values and bounds ``(M, n, T)`` (what the reference computes:
    :func:`autodeuq.metrics.mixture_moments` of :func:`autodeuq.ensemble.calibration.apply_scale`)."""
    w = np.asarray(weights, float)[:, None, None]
    c = np.ones(means.shape[-1]) if scale is None else np.asarray(scale, float)
    center = (w * means).sum(0)
    e_center = (w * e_means).sum(0)
    mu = center + c * (means - center)
    e_mu = e_center + c * (e_means + e_center)
    var = variances * c ** 2
    e_var = e_vars * c ** 2
    aleatoric, e_al = (w * var).sum(0), (w * e_var).sum(0)
    d = mu - center
    e_d = e_mu + e_center
    epistemic = (w * d ** 2).sum(0)
    e_ep = (w * (2 * np.abs(d) * e_d + e_d ** 2)).sum(0)
    total = aleatoric + epistemic
    out = {"mean": (center, e_center), "std": (np.sqrt(total), _sqrt_bound(total, e_al + e_ep)),
           "aleatoric_std": (np.sqrt(aleatoric), _sqrt_bound(aleatoric, e_al)),
           "epistemic_std": (np.sqrt(epistemic), _sqrt_bound(epistemic, e_ep))}
    return {k: SLACK * e + FLOAT64_RELATIVE * (np.abs(v) + 1.0) for k, (v, e) in out.items()}


def classification_bounds(logits, e_logits, weights, temperature):
    """Bounds of ``proba`` ``(n, K)``, ``entropy``, ``aleatoric_entropy``, ``epistemic_mi``
    ``(n,)`` from the members' logits and their bounds ``(M, n, K)``.

    A log-softmax moves by at most twice its inputs' largest error ``eta``, so each member
    probability by a relative ``r = exp(2 eta) - 1``, the mixture's likewise, and a term
    ``p log p`` by at most ``p r (|log p| + 1 + r)``."""
    from scipy.special import log_softmax

    w = np.asarray(weights, float)
    log_p = log_softmax(logits / temperature, axis=-1)
    p = np.exp(log_p)
    r = np.expm1(2 * e_logits.max(-1) / temperature)  # (M, n)
    proba = np.tensordot(w, p, axes=1)
    r_mix = r.max(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_proba = np.where(proba > 0, np.log(proba), 0.0)
    e_total = (proba * r_mix[:, None] * (np.abs(log_proba) + 1 + r_mix[:, None])).sum(-1)
    e_members = (p * r[..., None] * (np.abs(log_p) + 1 + r[..., None])).sum(-1)
    e_al = np.tensordot(w, e_members, axes=1)
    out = {"proba": proba * r_mix[:, None], "entropy": e_total, "aleatoric_entropy": e_al,
           "epistemic_mi": e_total + e_al}
    return {k: SLACK * e + FLOAT64_RELATIVE * 10 for k, e in out.items()}
