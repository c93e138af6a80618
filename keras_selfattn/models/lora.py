"""LoRA on a family model, as keras-hub's backbones do it: Keras's own
low-rank adapters (`Dense.enable_lora`, `EinsumDense.enable_lora`) on the
kernels of every attention and feed-forward layer, everything else frozen,
and the adapters alone saved to and loaded from a `.lora.h5` file.

The adapted kernels are those of the layers named `LORA_TARGETS` in every
family: each attention layer's query and value projections (keras-hub's
default, after the LoRA paper) and each feed-forward layer's two
projections. Keys, attention outputs, embeddings, layer norms and the output
logits stay as trained. At rank 4 that is 3.9% of the shipped music model's
weights (adding keys and outputs would make it 5.2%).
"""

import h5py
import keras
import numpy as np

LORA_TARGETS = ("query", "value", "feedforward_intermediate", "feedforward_output")
LORA_SUFFIX = ".lora.h5"


def enable_lora(model, rank, target_names=None):
    """Adds rank-`rank` adapters to the kernels of the layers named
    `target_names` (default `LORA_TARGETS`) and freezes every other weight,
    their kernels and biases included: only the adapters train."""
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
        raise ValueError(f"`rank` must be a positive integer. Received: rank={rank!r}")
    if _lora_layers(model):
        raise ValueError(f"LoRA is already enabled on {model.name!r} (rank {model._lora_rank}).")
    names = tuple(LORA_TARGETS if target_names is None else target_names)
    targets = [layer for layer in _layers_with_kernels(model) if _base_name(layer.name) in names]
    if not targets:
        raise ValueError(
            f"`target_names` must name Dense or EinsumDense layers of {model.name!r}. Received: "
            f"target_names={list(names)}"
        )
    model.trainable = True
    for layer in model._flatten_layers(include_self=False):
        layer.trainable = False
    for layer in targets:
        layer.trainable = True
        layer.enable_lora(rank)
        if layer.bias is not None:
            layer.bias.trainable = False
    model._lora_rank = int(rank)
    model._lora_layer_indices = [_layers_with_kernels(model).index(layer) for layer in targets]


def save_lora_weights(model, filepath):
    """Writes the adapters of `model` (and their rank) to `filepath`, which
    must end in `.lora.h5`."""
    layers = _lora_layers(model)
    if not layers:
        raise ValueError(f"LoRA is not enabled on {model.name!r}: call `enable_lora(rank)` first.")
    _check_suffix(filepath)
    with h5py.File(filepath, "w") as file:
        file.attrs["rank"] = model._lora_rank
        for index, layer in zip(model._lora_layer_indices, layers):
            group = file.create_group(f"lora/{index}")
            group.attrs["layer"] = layer.path
            group["lora_kernel_a"] = keras.ops.convert_to_numpy(layer.lora_kernel_a)
            group["lora_kernel_b"] = keras.ops.convert_to_numpy(layer.lora_kernel_b)


def load_lora_weights(model, filepath):
    """Loads adapters written by `save_lora_weights` into `model` (the same
    architecture), enabling LoRA at their rank first if it is not."""
    _check_suffix(filepath)
    with h5py.File(filepath, "r") as file:
        rank = int(file.attrs["rank"])
        if not _lora_layers(model):
            enable_lora(model, rank)
        if rank != model._lora_rank:
            raise ValueError(
                f"{filepath!r} holds adapters of rank {rank}; LoRA on {model.name!r} has rank {model._lora_rank}."
            )
        saved = sorted(int(index) for index in file["lora"])
        if saved != sorted(model._lora_layer_indices):
            raise ValueError(f"{filepath!r} adapts other layers than LoRA on {model.name!r} does.")
        kernels = _layers_with_kernels(model)
        for index in saved:
            group, layer = file[f"lora/{index}"], kernels[index]
            for name in ("lora_kernel_a", "lora_kernel_b"):
                variable = getattr(layer, name)
                if tuple(group[name].shape) != tuple(variable.shape):
                    raise ValueError(
                        f"{filepath!r}: {name} of layer {index} ({group.attrs['layer']}) has shape "
                        f"{tuple(group[name].shape)}; {layer.path} expects {tuple(variable.shape)}."
                    )
                variable.assign(group[name][()])


def _lora_layers(model):
    indices = getattr(model, "_lora_layer_indices", None)
    if not indices:
        return []
    kernels = _layers_with_kernels(model)
    return [kernels[index] for index in indices]


def _layers_with_kernels(model):
    """Every Dense and EinsumDense layer of `model`, in a fixed order."""
    return [
        layer for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))
    ]


def _base_name(name):
    """A layer's name without the `_N` Keras adds to make it unique."""
    stem, _, suffix = name.rpartition("_")
    return stem if stem and suffix.isdigit() else name


def _check_suffix(filepath):
    if not str(filepath).endswith(LORA_SUFFIX):
        raise ValueError(f"`filepath` must end in {LORA_SUFFIX!r}. Received: filepath={str(filepath)!r}")
