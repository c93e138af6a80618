"""Plain reference implementations the tests compare against."""

import math

import keras
import numpy as np


def plain_timing_signal(positions, channels, min_timescale=1.0, max_timescale=1.0e4):
    """tensor2tensor's layout, one number at a time."""
    half = channels // 2
    increment = math.log(max_timescale / min_timescale) / max(half - 1, 1)
    rows = []
    for position in positions:
        row = [0.0] * channels
        for k in range(half):
            angle = position * min_timescale * math.exp(-k * increment)
            row[k] = math.sin(angle)
            row[half + k] = math.cos(angle)
        rows.append(row)
    return np.array(rows)


def naive_multi_head_attention(layer, query, value, mask):
    """Projections, masked softmax and output projection written out in numpy."""
    weights = {w.path.split("/")[-2] + "/" + w.name: np.asarray(keras.ops.convert_to_numpy(w)) for w in layer.weights}
    q = np.einsum("btf,fnh->btnh", query, weights["query/kernel"]) + weights["query/bias"]
    k = np.einsum("bsf,fnh->bsnh", value, weights["key/kernel"]) + weights["key/bias"]
    v = np.einsum("bsf,fnh->bsnh", value, weights["value/kernel"]) + weights["value/bias"]
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
    probabilities = naive_masked_softmax(logits, mask)
    heads = np.einsum("bnts,bsnh->btnh", probabilities, v)
    return (
        np.einsum("btnh,nhf->btf", heads, weights["attention_output/kernel"])
        + weights["attention_output/bias"]
    )


def naive_masked_softmax(logits, mask):
    """Softmax over the last axis where `mask` (broadcastable) is True, 0
    elsewhere; a row with nothing allowed is all 0."""
    mask = np.broadcast_to(mask, logits.shape)
    logits = np.where(mask, logits, -np.inf)
    peak = np.max(logits, -1, keepdims=True)
    exps = np.exp(logits - np.where(np.isfinite(peak), peak, 0))
    total = exps.sum(-1, keepdims=True)
    return np.divide(exps, total, out=np.zeros_like(exps), where=total > 0)


def naive_attention_scores(layer, query, key, mask, relative_logits=0.0):
    """Dense `[batch, heads, query, key]` float64 probabilities of an
    attention layer over sequences `query` and `key` `[batch, length,
    features]`, from its own query and key projections: every pair's logit,
    then a softmax over the keys `mask` allows (broadcastable to the
    scores), written out in numpy. `relative_logits` is added before the
    logit scale."""
    q, k = (
        np.asarray(keras.ops.convert_to_numpy(dense(x)), "float64")
        for dense, x in ((layer.query_dense, query), (layer.key_dense, key))
    )  # [batch, length, heads, dim]
    logits = (np.einsum("bqhd,bkhd->bhqk", q, k) + relative_logits) * float(layer.logit_scale)
    return naive_masked_softmax(logits, mask)


def backend_gradients(function, arrays):
    """Gradients of the scalar `function(*arrays)` by the backend's autodiff.

    An input the result does not depend on gets a zero gradient.
    """
    if keras.backend.backend() == "jax":
        import jax

        gradients = jax.grad(function, argnums=tuple(range(len(arrays))))(*arrays)
        return [np.asarray(g) for g in gradients]
    if keras.backend.backend() == "torch":
        import torch

        tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
        gradients = torch.autograd.grad(function(*tensors), tensors, allow_unused=True)
        return [
            np.zeros_like(a) if g is None else g.detach().cpu().numpy()
            for a, g in zip(arrays, gradients)
        ]
    import tensorflow as tf

    tensors = [tf.constant(a) for a in arrays]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        total = function(*tensors)
    return [
        np.zeros_like(a) if g is None else g.numpy()
        for a, g in zip(arrays, tape.gradient(total, tensors))
    ]
