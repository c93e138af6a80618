"""A Transformer encoder over graphs: node tokens and typed relations
(relational attention; Hellendoorn et al. 2020, GREAT)."""

import keras
from keras import ops

from keras_selfattn.layers.argument_checks import check_positive_int
from keras_selfattn.layers.relational_attention import RelationalAttention
from keras_selfattn.models.config import (
    check_divisible_width,
    check_vocabulary_size,
    renamed_argument,
    resolve_preset,
)
from keras_selfattn.models.decoding import layers_by_name, numbered_layers
from keras_selfattn.models.family_model import FamilyModel

GRAPH_PRESETS = {
    # Transformer-base sizes.
    "base": dict(
        num_layers=6, hidden_dim=512, num_heads=8, feedforward_dim=2048, dropout=0.1,
        add_relative_bias=True, heads_share_relative_embedding=True,
    ),
    "small": dict(
        num_layers=4, hidden_dim=128, num_heads=4, feedforward_dim=512, dropout=0.1,
        add_relative_bias=True, heads_share_relative_embedding=True,
    ),
    "tiny": dict(
        num_layers=2, hidden_dim=32, num_heads=2, feedforward_dim=64, dropout=0.0,
        add_relative_bias=True, heads_share_relative_embedding=True,
    ),
}

_BLOCK_PARTS = ("attention_norm", "attention", "feedforward_norm", "feedforward", "output")


def graph_transformer(
    vocabulary_size=None, num_relations=None, preset="base", check_inputs=True, **overrides
):
    """Builds a pre-norm Transformer encoder over a graph as a Functional model.

    Inputs `{"token_ids": [batch, nodes], "relations": [batch, nodes,
    nodes]}`: int32 node tokens (0 = padding: padded nodes neither attend
    nor are attended to) and dense relation ids (0 = no relation, `1 ..
    num_relations` the edge types from node `i` to node `j`, as
    `RelationalAttention` reads them). Output float32 node encodings
    `[batch, nodes, hidden_dim]`.

    With `check_inputs` every token id must lie in `[0, vocabulary_size)` and
    every relation id in `[0, num_relations]`, else the call fails with a
    message naming `token_ids` or `relations` and the bound: a `ValueError`
    for values known at call time, an `InvalidArgumentError` in a
    TensorFlow graph (`fit`, `predict`, `tf.function`, SavedModel), as
    `RelationalAttention(check_relations=True)` does; on TensorFlow the
    model is then never compiled with XLA, which drops the checks. Under
    `jax.jit` nothing is checked.

    Args:
        vocabulary_size: number of token ids (>= 2), id 0 the padding
            (`vocab_size=` is its old name).
        num_relations: number of relation types (>= 1).
        preset: `"base"`, `"small"` or `"tiny"`.
        check_inputs: whether token and relation ids are checked; `False`
            runs unchecked, and with XLA where Keras chooses it (an unknown
            relation id then adds no relation term; keep token ids in range).
        **overrides: hyperparameters replacing the preset's: `num_layers`,
            `hidden_dim`, `num_heads` (`key_dim = hidden_dim / num_heads`),
            `feedforward_dim`, `dropout`, `add_relative_bias`,
            `heads_share_relative_embedding`.

    Returns:
        A `GraphTransformer`, whose `attention_scores` method gives a
        block's attention probabilities.
    """
    vocabulary_size = renamed_argument(overrides, "vocab_size", "vocabulary_size", vocabulary_size)
    check_vocabulary_size("vocabulary_size", vocabulary_size)
    check_positive_int("num_relations", num_relations)
    if not isinstance(check_inputs, bool):
        raise ValueError(f"`check_inputs` must be True or False. Received: check_inputs={check_inputs!r}")
    config = resolve_preset("graph_transformer", GRAPH_PRESETS, preset, overrides)
    check_divisible_width(config["hidden_dim"], config["num_heads"])
    layers = {"token_embedding": keras.layers.Embedding(vocabulary_size, config["hidden_dim"], name="token_embedding")}
    for index in range(config["num_layers"]):
        layers.update(_block_layers(index, num_relations, config, check_inputs))
    layers["encoder_norm"] = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    relations = keras.Input((None, None), dtype="int32", name="relations")
    encodings = encode_graph(layers, token_ids, relations)
    return GraphTransformer(
        {"token_ids": token_ids, "relations": relations}, encodings, name="graph_transformer"
    )


def _block_layers(index, num_relations, config, check_relations):
    prefix = f"encoder_block_{index}_"
    hidden_dim, dropout = config["hidden_dim"], config["dropout"]
    return {
        prefix + "attention_norm": keras.layers.LayerNormalization(epsilon=1e-6, name=prefix + "attention_norm"),
        prefix + "attention": RelationalAttention(
            num_heads=config["num_heads"],
            key_dim=hidden_dim // config["num_heads"],
            num_relations=num_relations,
            add_relative_bias=config["add_relative_bias"],
            heads_share_relative_embedding=config["heads_share_relative_embedding"],
            dropout=dropout,
            check_relations=check_relations,
            name=prefix + "attention",
        ),
        prefix + "feedforward_norm": keras.layers.LayerNormalization(epsilon=1e-6, name=prefix + "feedforward_norm"),
        prefix + "feedforward": keras.layers.Dense(config["feedforward_dim"], activation="relu", name=prefix + "feedforward"),
        prefix + "output": keras.layers.Dense(hidden_dim, name=prefix + "output"),
        prefix + "dropout": keras.layers.Dropout(dropout, name=prefix + "dropout"),
    }


def encode_graph(layers, token_ids, relations, training=None, scores_of_block=None):
    """The encoder's forward pass over its layers by name: float32 node
    encodings, or with `scores_of_block` (an index, negative from the last)
    that block's attention probabilities `[batch, heads, nodes, nodes]`."""
    present = ops.not_equal(token_ids, 0)
    x = layers["token_embedding"](token_ids)
    num_blocks = len(numbered_layers(_attention_layers(layers), "encoder_block_"))
    if scores_of_block is not None:
        scores_of_block = range(num_blocks)[scores_of_block]
    for index in range(num_blocks):
        part = {name: layers[f"encoder_block_{index}_{name}"] for name in _BLOCK_PARTS + ("dropout",)}
        attended = part["attention"](
            part["attention_norm"](x), query_mask=present, relations=relations,
            training=training, return_attention_scores=index == scores_of_block,
        )
        if index == scores_of_block:
            return attended[1]
        x = x + part["dropout"](attended, training=training)
        hidden = part["feedforward"](part["feedforward_norm"](x))
        x = x + part["dropout"](part["output"](hidden), training=training)
    return ops.cast(layers["encoder_norm"](x), "float32")


def _attention_layers(layers):
    """`{"encoder_block_<i>": block i's attention layer}`."""
    suffix = "_attention"
    return {name[: -len(suffix)]: layer for name, layer in layers.items() if name.endswith(suffix)}


@keras.saving.register_keras_serializable(package="keras_selfattn")
class GraphTransformer(FamilyModel):
    """A Transformer encoder over graphs (`graph_transformer` builds it).

    Inputs `{"token_ids": [batch, nodes], "relations": [batch, nodes,
    nodes]}`, output float32 node encodings `[batch, nodes, hidden_dim]`.
    """

    builder_name = "graph_transformer"
    family = "graph"

    @classmethod
    def _has_layout(cls, model):
        layers = layers_by_name(model)
        inputs = {tensor.name for tensor in model.inputs}
        needed = ("token_embedding", "encoder_block_0_attention", "encoder_norm")
        return all(name in layers for name in needed) and inputs == {"token_ids", "relations"}

    @property
    def num_relations(self):
        return self._named_layers["encoder_block_0_attention"].num_relations

    @property
    def vocabulary_size(self):
        return self._named_layers["token_embedding"].input_dim

    @property
    def checks_inputs(self):
        """Whether token and relation ids are checked (`check_inputs`)."""
        return self._named_layers["encoder_block_0_attention"].check_relations

    def attention_scores(self, token_ids, relations, block=-1):
        """`[batch, heads, nodes, nodes]` attention probabilities of encoder
        block `block` (an index, negative counting from the last)."""
        token_ids = self._checked_inputs({"token_ids": token_ids})["token_ids"]
        return encode_graph(self._named_layers, token_ids, relations, scores_of_block=block)

    _check_switch = "check_inputs"

    def serving_endpoints(self, options):
        """`export_for_serving`'s `serving_default`: node tokens and relations
        in, `encodings` and a per-row `status` out."""
        from keras_selfattn.export import graph_signatures

        options.refuse_others("graph")
        return [graph_signatures.graph_endpoint(self, "encodings")], []

    def _input_bounds(self):
        if not self.checks_inputs:
            return {}
        return {"token_ids": ("token id", self.vocabulary_size)}


@keras.saving.register_keras_serializable(package="keras_selfattn")
class GraphHeads(FamilyModel):
    """Heads over a `GraphTransformer`: a Functional model with inputs
    `token_ids` and `relations` whose outputs are a dict of named heads
    over the encoder's node encodings (the VarMisuse model is one)."""

    builder_name = "keras_selfattn.models (heads over graph_transformer, with dict outputs)"

    @classmethod
    def _has_layout(cls, model):
        try:
            outputs, inputs = model.output, model.inputs
        except (AttributeError, ValueError):  # a subclassed model: no symbolic outputs
            return False
        return (
            isinstance(outputs, dict)
            and {tensor.name for tensor in inputs} == {"token_ids", "relations"}
            and any(isinstance(layer, GraphTransformer) for layer in model.layers)
        )

    def serving_endpoints(self, options):
        """`export_for_serving`'s `serving_default`: the heads' named outputs
        as float32, and a per-row `status`."""
        from keras_selfattn.export import graph_signatures

        options.refuse_others("graph")
        return [graph_signatures.graph_endpoint(self, None)], []
