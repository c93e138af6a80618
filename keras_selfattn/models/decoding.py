"""Reading a plain Functional model by its layer names: how the music and
translation models saved by earlier versions, which had no class of their
own, are rebuilt as their family's class (`FamilyModel.from_model`). Models
of this version own their layers as attributes and never look one up.

Builders named their layers `target_embedding`, `target_position`,
`note_state`, `decoder_block_{i}`, `decoder_norm` and `logits`;
encoder-decoder models added `source_embedding`, `source_position`,
`encoder_block_{i}` and `encoder_norm`. One embedding shared by source and
target is one layer, `source_embedding`; `layers_by_name` lists it as
`target_embedding` too.
"""


def layers_by_name(model):
    """The model's layers as a `{name: layer}` dict.

    An encoder-decoder model (inputs `source_tokens` and `target_tokens`)
    without a `target_embedding` layer embeds its targets with its
    `source_embedding`: that layer is listed under both names.
    """
    layers = {layer.name: layer for layer in model.layers}
    input_names = {tensor.name for tensor in model.inputs}
    if (
        "target_embedding" not in layers
        and "source_embedding" in layers
        and {"source_tokens", "target_tokens"} <= input_names
    ):
        layers["target_embedding"] = layers["source_embedding"]
    return layers


def numbered_layers(layers, prefix):
    """`layers[prefix + "0"]`, `layers[prefix + "1"]`, ... in order."""
    found = []
    while f"{prefix}{len(found)}" in layers:
        found.append(layers[f"{prefix}{len(found)}"])
    return found
