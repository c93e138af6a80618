"""Pieces both Transformer blocks use (not a public layer)."""

import keras

from keras_selfattn.layers.quantized_sublayers import dtype_config


def check_block_arguments(attention, feedforward_dim, dropout):
    """Raises `ValueError` for arguments no Transformer block can use."""
    if not isinstance(attention, keras.layers.Layer):
        raise ValueError(
            "The attention argument must be a Keras attention layer instance, "
            f"e.g. `MultiHeadAttention(8, 64)`. Received: {attention!r}"
        )
    if not isinstance(feedforward_dim, int) or feedforward_dim <= 0:
        raise ValueError(
            "`feedforward_dim` must be a positive integer. "
            f"Received: feedforward_dim={feedforward_dim}"
        )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"`dropout` must lie in [0, 1). Received: dropout={dropout}")


def layer_norm(block, name, inputs_shape):
    """A built `LayerNormalization` named `name` with `block`'s epsilon and dtype."""
    norm = keras.layers.LayerNormalization(
        epsilon=block.layer_norm_epsilon, dtype=block.dtype_policy, name=name
    )
    norm.build(inputs_shape)
    return norm


def feedforward_layers(block, inputs_shape):
    """`(residual_dropout, feedforward_norm, feedforward)` of `block`, built:
    the dropout of every residual branch, and the normalisation and
    `Dense -> Dropout -> Dense` network of the feed-forward one."""
    residual_dropout = keras.layers.Dropout(block.dropout, dtype=block.dtype_policy)
    norm = layer_norm(block, "feedforward_norm", inputs_shape)
    network = keras.Sequential(
        [
            keras.layers.Dense(
                block.feedforward_dim,
                activation=block.activation,
                dtype=block.dtype_policy,
                name="feedforward_intermediate",
            ),
            keras.layers.Dropout(block.dropout, dtype=block.dtype_policy),
            keras.layers.Dense(inputs_shape[-1], dtype=block.dtype_policy, name="feedforward_output"),
        ],
        name="feedforward",
    )
    network.build(inputs_shape)
    return residual_dropout, norm, network


def residual_connection(x, sublayer, norm, dropout, norm_first, training):
    """`x + dropout(sublayer(norm(x)))` (pre-norm) or
    `norm(x + dropout(sublayer(x)))` (post-norm)."""
    if norm_first:
        return x + dropout(sublayer(norm(x)), training=training)
    return norm(x + dropout(sublayer(x), training=training))


def residual_branches(x, branches, dropout, norm_first, training):
    """`x` through each `(sublayer, norm)` of `branches` in turn, each in a
    residual connection: the body of every Transformer block."""
    for sublayer, norm in branches:
        x = residual_connection(x, sublayer, norm, dropout, norm_first, training)
    return x


def build_once(layer, *shapes):
    """Builds `layer` unless it already is (a deserialized sublayer is)."""
    if not layer.built:
        layer.build(*shapes)


def block_config(block):
    """The constructor arguments both Transformer blocks have, serialized;
    `dtype` names the feed-forward layers that are quantized."""
    feedforward_layers = block._feedforward.layers if block.built else ()
    return {
        "dtype": dtype_config(block, feedforward_layers),
        "self_attention": keras.layers.serialize(block.self_attention),
        "feedforward_dim": block.feedforward_dim,
        "dropout": block.dropout,
        "norm_first": block.norm_first,
        "activation": block.activation,
        "layer_norm_epsilon": block.layer_norm_epsilon,
    }


def deserialize_attention_layers(config, *names):
    """A copy of `config` with the named attention layer configs deserialized."""
    config = dict(config)
    for name in names:
        if config.get(name) is not None:
            config[name] = keras.layers.deserialize(config[name])
    return config
