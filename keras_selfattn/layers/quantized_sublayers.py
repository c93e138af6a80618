"""The dtype policy a layer's config stores when sublayers it builds are
quantized (not a public layer).

`Model.quantize` quantizes the innermost layers only (`Dense`,
`EinsumDense`, `Embedding`): the layer that built them keeps its float
policy, and from that policy alone a `.keras` file would rebuild float
sublayers, which cannot take the saved int8 weights. The config then stores a
`keras.dtype_policies.DTypePolicyMap` instead, Keras's form for mixed
policies: its default is the layer's own policy, and it gives each quantized
sublayer its quantized one. The layer passes its policy to the sublayers it
builds (`dtype=self.dtype_policy`), and each looks itself up in the map by
its path.
"""

import re

import keras

_PolicyMap = keras.dtype_policies.DTypePolicyMap


def dtype_config(layer, sublayers):
    """`layer`'s policy as its config stores it (`"dtype"`): serialized as
    it is, or, when some of `sublayers` (built by `layer` with its policy)
    are quantized, as a map that gives each of them its quantized policy."""
    policies = _PolicyMap(default_policy=_own_policy(layer))
    for sublayer in sublayers:
        if sublayer is not None and sublayer.quantization_mode is not None:
            policies[_path_pattern(layer, sublayer)] = _resolved_policy(sublayer)
    return keras.dtype_policies.serialize(policies if len(policies) else layer.dtype_policy)


def _own_policy(layer):
    """`layer`'s policy, or its map's default if it was loaded with a map."""
    policy = layer.dtype_policy
    return policy.default_policy if isinstance(policy, _PolicyMap) else policy


def _resolved_policy(sublayer):
    """The policy `sublayer` runs with: a map's entry for its path."""
    policy = sublayer.dtype_policy
    return policy[sublayer.path] if isinstance(policy, _PolicyMap) else policy


def _path_pattern(layer, sublayer):
    """A pattern of `sublayer`'s path that holds wherever `layer` is built:
    `layer`'s name and the path below it, after any parents. A map is
    looked up by full path, and a layer's parents differ between the model
    that saved it and one loading it (a block deserializes and builds its
    attention layer outside its own name scope)."""
    below = sublayer.path[len(layer.path) + 1 :]
    return "(?:.*/)?" + re.escape(f"{layer.name}/{below}")
