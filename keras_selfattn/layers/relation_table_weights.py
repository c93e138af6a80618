"""The relation tables of the relative layers as weights: one shape rule,
one default initializer, one config form."""

import keras


def add_relation_table(layer, name, rows, depth, shared_by_heads):
    """A weight `[rows, depth]` (shared by the heads) or `[num_heads, rows,
    depth]`, initialised by `layer.relative_embeddings_initializer`, else
    N(0, key_dim ** -0.5)."""
    shape = (rows, depth) if shared_by_heads else (layer.num_heads, rows, depth)
    initializer = layer.relative_embeddings_initializer
    if initializer is None:
        initializer = keras.initializers.RandomNormal(stddev=layer.key_dim**-0.5)
    return layer.add_weight(name=name, shape=shape, initializer=keras.initializers.get(initializer))


def initializer_config(initializer):
    """`initializer` (a name, instance or None) as a layer config stores it."""
    if initializer is None:
        return None
    return keras.initializers.serialize(keras.initializers.get(initializer))
