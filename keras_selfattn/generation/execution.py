"""How the generation loop runs when it is called eagerly: as one graph on
TensorFlow, without autograd on PyTorch."""

import contextlib
import functools

import keras
import numpy as np


def graph_when_eager(function):
    """Runs `function` as a `tf.function` when it is called eagerly on TensorFlow.

    A while loop of eager steps dispatches every op from Python; as a graph
    the loop runs in TensorFlow. One trace per model, input shapes and
    settings is kept and reused (the seed travels as a tensor, so a new seed
    does not retrace). Inside `tf.function`, `jax.jit`, or on other backends
    `function` runs as it is. The `tf.function` is the wrapper's
    `graph_function`.
    """
    if keras.backend.backend() != "tensorflow":
        return function
    import tensorflow as tf

    graph = tf.function(function, autograph=False)

    @functools.wraps(function)
    def wrapper(*args, seed=None, **kwargs):
        if not tf.executing_eagerly():
            return function(*args, seed=seed, **kwargs)
        if seed is None:
            seed = np.random.randint(0, 2**31 - 1)
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and 0 <= seed < 2**31:
            seed = tf.constant(seed, "int32")
        return graph(*args, seed=seed, **kwargs)

    wrapper.graph_function = graph
    return wrapper


def gradients_off():
    """A context in which the backend records no gradients: `torch.no_grad()`
    on the PyTorch backend, nothing on the others.

    Eager torch ops record an autograd graph whenever a weight takes part:
    over a generation loop that graph holds every step's activations until
    the outputs are freed, and float outputs (translation scores) come back
    requiring grad, which `np.asarray` refuses. Generation never
    differentiates, so on torch it records nothing.
    """
    if keras.backend.backend() != "torch":
        return contextlib.nullcontext()
    return _torch_no_grad()


def _torch_no_grad():
    # Runs only on the torch backend, where Keras has imported torch.
    import torch

    return torch.no_grad()
