"""Reading plain Functional models: the one place that looks layers up by
name or type.

Earlier versions built each family as a plain Functional model, whose file
`keras.models.load_model` reads back as one; `FamilyModel.from_config` and
`FamilyModel.from_model` rebuild it as its family's class from the
hyperparameters read here. A user's own Functional graph of heads over a
`GraphTransformer` (`GraphHeads`) is recognised here too.

The builders of those versions named their layers `target_embedding`,
`target_position`, `note_state`, `decoder_block_{i}`, `decoder_norm` and
`logits`; encoder-decoder models added `source_embedding`,
`source_position`, `encoder_block_{i}` and `encoder_norm` (one embedding
shared by source and target is one layer, `source_embedding`); image models
`pixel_embedding`, `class_embedding`, `upsampler`, `pixel_dropout`; graph
models were read by layer type.

Every reader is keyed by the family name (`model_class.family`), so this
module imports no family class (`presets.family_class` names one).
"""

import keras

from keras_selfattn.layers.local_attention_1d import LocalAttention1D
from keras_selfattn.layers.local_attention_2d import LocalAttention2D
from keras_selfattn.layers.local_relative_attention_1d import LocalRelativeAttention1D
from keras_selfattn.layers.local_relative_attention_2d import LocalRelativeAttention2D
from keras_selfattn.layers.memory_compressed_attention import MemoryCompressedAttention
from keras_selfattn.layers.relational_attention import RelationalAttention
from keras_selfattn.layers.relative_multi_head_attention import RelativeMultiHeadAttention
from keras_selfattn.layers.tied_output_projection import TiedOutputProjection
from keras_selfattn.models.image_common import DMOL_OUTPUTS_PER_MIXTURE
from keras_selfattn.models.image_low_resolution import upsampler_arguments
from keras_selfattn.models.presets import family_class

# The keys of a Functional model's config: a file saved when the family
# classes were Functional models assembled by builder functions.
FUNCTIONAL_CONFIG_KEYS = ("layers", "input_layers", "output_layers")
# The encoder hyperparameters a `VariableMisuseModel` takes.
VARIABLE_MISUSE_ARGUMENTS = (
    "vocabulary_size", "num_relations", "num_layers", "hidden_dim", "num_heads", "feedforward_dim",
    "dropout", "add_relative_bias", "heads_share_relative_embedding", "check_inputs",
)
GRAPH_INPUTS = {"token_ids", "relations"}


def is_functional_config(config):
    """Whether `config` is a plain Functional model's (an earlier version's file)."""
    return all(key in config for key in FUNCTIONAL_CONFIG_KEYS)


def has_layout(model_class, model):
    """Whether the plain Keras model `model` has the layers and inputs of
    `model_class`'s family as an earlier version built it."""
    reader = _READERS.get(model_class.family)
    return reader is not None and isinstance(model, keras.Model) and reader[0](model)


def saved_arguments(model_class, model):
    """The constructor arguments of `model_class` that rebuild the plain
    model `model` (one of `has_layout`)."""
    return _READERS[model_class.family][1](model_class, model)


def plain_class(model_class, model):
    """The class the plain model `model` becomes: `model_class`, or its
    super-resolution subclass for an image model with a low-resolution input."""
    if model_class.family == "image" and "low_resolution" in _input_shapes(model):
        return family_class("super_resolution")
    return model_class


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


def held_encoder(model):
    """The `GraphTransformer` among `model`'s layers, or `None`."""
    return next((layer for layer in model.layers if getattr(layer, "family", None) == "graph"), None)


def is_graph_heads(model):
    """Whether `model` is a Functional model with inputs `token_ids` and
    `relations`, a dict of outputs, and a `GraphTransformer` among its layers."""
    try:
        outputs, inputs = model.output, model.inputs
    except (AttributeError, ValueError):  # a subclassed model: no symbolic outputs
        return False
    return (
        isinstance(outputs, dict)
        and {tensor.name for tensor in inputs} == GRAPH_INPUTS
        and held_encoder(model) is not None
    )


def _input_shapes(model):
    return {tensor.name: tuple(tensor.shape) for tensor in model.inputs}


def _is_music(model):
    layers = layers_by_name(model)
    return all(name in layers for name in ("target_embedding", "decoder_block_0", "logits")) and not (
        "source_embedding" in layers or "pixel_embedding" in layers or len(model.inputs) != 1
    )


def _music_arguments(model_class, model):
    layers = layers_by_name(model)
    embedding = layers["target_embedding"]
    blocks = numbered_layers(layers, "decoder_block_")
    attention = blocks[0].self_attention
    kind = {
        RelativeMultiHeadAttention: "relative_global",
        LocalRelativeAttention1D: "relative_local",
    }.get(type(attention), "absolute")
    second = blocks[1].self_attention if len(blocks) > 1 else None
    if isinstance(second, MemoryCompressedAttention):
        kind = "local_compressed"
    note_state = layers.get("note_state")
    defaults = model_class.presets["tiny"]["hyperparameters"]
    return dict(
        vocabulary_size=embedding.input_dim, num_layers=len(blocks), hidden_dim=embedding.output_dim,
        num_heads=attention.num_heads, key_dim=attention.key_dim,
        feedforward_dim=blocks[0].feedforward_dim, dropout=blocks[0].dropout, attention=kind,
        max_relative_position=getattr(attention, "max_relative_position", defaults["max_relative_position"]),
        block_length=getattr(attention, "block_length", defaults["block_length"]),
        timing_signal="target_position" in layers, note_event_ids=_note_event_ids(note_state),
        timed_note_state=note_state is not None and note_state.timed,
        compression_factor=getattr(second, "compression_factor", defaults["compression_factor"]),
    )


def _note_event_ids(note_state):
    """The `note_event_ids` a `NoteStateEmbedding` layer was built with."""
    if note_state is None:
        return None
    last = note_state.num_pitches - 1
    ids = {
        "note_on": (note_state.note_on_id, note_state.note_on_id + last),
        "note_off": (note_state.note_off_id, note_state.note_off_id + last),
    }
    if note_state.timed:
        ids["time_shift"] = (note_state.time_shift_id, note_state.time_shift_id + note_state.num_time_shifts - 1)
    return ids


def _is_translation(model):
    layers = layers_by_name(model)
    needed = ("target_embedding", "decoder_block_0", "logits", "source_embedding", "encoder_block_0")
    inputs = {tensor.name for tensor in model.inputs}
    return all(name in layers for name in needed) and inputs == {"source_tokens", "target_tokens"}


def _translation_arguments(model_class, model):
    layers = layers_by_name(model)
    blocks = numbered_layers(layers, "decoder_block_")
    attention = blocks[0].self_attention
    shaw = isinstance(attention, RelativeMultiHeadAttention)
    return dict(
        source_vocabulary_size=layers["source_embedding"].input_dim,
        target_vocabulary_size=layers["target_embedding"].input_dim,
        num_layers=len(blocks), hidden_dim=layers["source_embedding"].output_dim,
        num_heads=attention.num_heads, feedforward_dim=blocks[0].feedforward_dim,
        dropout=blocks[0].dropout,
        share_embeddings=layers["target_embedding"] is layers["source_embedding"],
        tie_output_projection=isinstance(layers["logits"], TiedOutputProjection),
        norm_first=blocks[0].norm_first, position="shaw" if shaw else "sinusoidal",
        max_relative_position=attention.max_relative_position if shaw else 16,
    )


def _is_image(model):
    layers = {layer.name for layer in model.layers}
    return {"pixel_embedding", "decoder_block_0", "logits"} <= layers and "pixels" in _input_shapes(model)


def _is_super_resolution(model):
    return _is_image(model) and "low_resolution" in _input_shapes(model)


def _image_arguments(model_class, model):
    layers = {layer.name: layer for layer in model.layers}
    class_embedding = layers.get("class_embedding")
    return dict(
        image_shape=_input_shapes(model)["pixels"][1:],
        **_image_decoder_arguments(layers),
        num_classes=None if class_embedding is None else class_embedding.input_dim,
    )


def _super_resolution_arguments(model_class, model):
    layers = {layer.name: layer for layer in model.layers}
    shapes = _input_shapes(model)
    upsampler = layers.get("upsampler")
    pixel_dropout = layers.get("pixel_dropout")
    arguments = dict(
        low_shape=shapes["low_resolution"][1:], high_shape=shapes["pixels"][1:],
        **_image_decoder_arguments(layers),
        num_encoder_layers=len(numbered_layers(layers, "encoder_block_")),
        pixel_dropout=0.0 if pixel_dropout is None else pixel_dropout.rate,
        upsampled_inputs=upsampler is not None,
    )
    if upsampler is not None:
        upsampler_layers, upsampler_width = upsampler_arguments(upsampler)
        arguments["upsampler_layers"] = upsampler_layers
        if upsampler_width is not None:
            arguments["upsampler_width"] = upsampler_width
    return arguments


def _image_decoder_arguments(layers):
    """An image decoder's constructor arguments, read from the layers of a
    plain model; those its attention or head does not use keep their defaults."""
    blocks = numbered_layers(layers, "decoder_block_")
    attention = blocks[0].self_attention
    embedding = layers["pixel_embedding"]
    arguments = dict(
        num_layers=len(blocks), num_heads=attention.num_heads, feedforward_dim=blocks[0].feedforward_dim,
        dropout=blocks[0].dropout,
    )
    if isinstance(attention, LocalAttention2D):
        kind = "relative_local_2d" if isinstance(attention, LocalRelativeAttention2D) else "local_2d"
        arguments.update(block_shape=tuple(attention.block_shape), memory_flange=tuple(attention.memory_flange))
    elif isinstance(attention, LocalAttention1D):
        kind = "local_1d"
        arguments["block_length"] = attention.block_length
    else:
        kind = "global"
    arguments["attention"] = kind
    if isinstance(embedding, keras.layers.Dense):
        arguments.update(head="dmol", hidden_dim=embedding.units)
        arguments["num_mixtures"] = layers["logits"].units // DMOL_OUTPUTS_PER_MIXTURE
    else:
        arguments.update(head="categorical", hidden_dim=embedding.output_dim)
    return arguments


def _is_graph(model):
    """A plain Functional model as `graph_transformer` built them: inputs
    `token_ids` and `relations`, one output, an embedding and relational
    attention among its own layers."""
    return (
        {tensor.name for tensor in model.inputs} == GRAPH_INPUTS
        and len(model.outputs) == 1
        and any(isinstance(layer, keras.layers.Embedding) for layer in model.layers)
        and any(isinstance(layer, RelationalAttention) for layer in model.layers)
    )


def _graph_arguments(model_class, model):
    """Read from the layers by type, in the order the graph calls them."""
    (embedding,) = [layer for layer in model.layers if isinstance(layer, keras.layers.Embedding)]
    attentions = [layer for layer in model.layers if isinstance(layer, RelationalAttention)]
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    attention = attentions[0]
    return dict(
        vocabulary_size=embedding.input_dim, num_relations=attention.num_relations,
        num_layers=len(attentions), hidden_dim=embedding.output_dim, num_heads=attention.num_heads,
        feedforward_dim=dense[0].units, dropout=attention.dropout,
        add_relative_bias=attention.add_relative_bias,
        heads_share_relative_embedding=attention.heads_share_relative_embedding,
        check_inputs=attention.check_relations,
    )


def _is_variable_misuse(model):
    """A plain Functional model as recipes/variable_misuse.py built them:
    outputs `bug` and `repair` over a `GraphTransformer`."""
    return is_graph_heads(model) and set(model.output) == {"bug", "repair"}


def _variable_misuse_arguments(model_class, model):
    """Its encoder's hyperparameters."""
    config = held_encoder(model).get_config()
    return {name: config[name] for name in VARIABLE_MISUSE_ARGUMENTS}


# `{family: (whether a plain model has its layout, its constructor arguments)}`.
_READERS = {
    "music": (_is_music, _music_arguments),
    "translation": (_is_translation, _translation_arguments),
    "image": (_is_image, _image_arguments),
    "super_resolution": (_is_super_resolution, _super_resolution_arguments),
    "graph": (_is_graph, _graph_arguments),
    "variable_misuse": (_is_variable_misuse, _variable_misuse_arguments),
}
