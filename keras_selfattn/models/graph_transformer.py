"""A Transformer encoder over graphs: node tokens and typed relations
(relational attention; Hellendoorn et al. 2020, GREAT)."""

import dataclasses

import keras
from keras import ops

from keras_selfattn.layers.argument_checks import check_positive_int
from keras_selfattn.layers.relational_attention import RelationalAttention
from keras_selfattn.layers.transformer_block_parts import residual_branches
from keras_selfattn.models.config import (
    check_divisible_width,
    check_vocabulary_size,
    renamed_argument,
    resolve_preset,
)
from keras_selfattn.models.family_model import FamilyModel
from keras_selfattn.models.presets import register_presets

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


@dataclasses.dataclass(frozen=True)
class GraphEncoderBlock:
    """The layers of one pre-norm encoder block, which the model calls one
    by one.

    Not a `TransformerEncoderBlock`: a `.keras` file keys each weight by the
    position of its layer among the model's layers, so a model whose blocks
    were single layers could not load the files of earlier versions, whose
    Functional graph held these layers (named `encoder_block_{i}_<field>`).
    Its body is `TransformerEncoderBlock`'s (`residual_branches`, pre-norm);
    unlike that block's feedforward network, this one has no dropout between
    its two layers.
    """

    attention_norm: keras.layers.Layer
    attention: RelationalAttention
    dropout: keras.layers.Layer
    feedforward_norm: keras.layers.Layer
    feedforward: keras.layers.Layer
    output: keras.layers.Layer

    def __call__(self, x, present, relations, training=None):
        def attend(normed):
            return self.attention(normed, query_mask=present, relations=relations, training=training)

        def feedforward(normed):
            return self.output(self.feedforward(normed))

        branches = [(attend, self.attention_norm), (feedforward, self.feedforward_norm)]
        return residual_branches(x, branches, self.dropout, True, training)

    def attention_scores(self, x, present, relations):
        """`[batch, heads, nodes, nodes]` attention probabilities of the block's input `x`."""
        _, scores = self.attention(
            self.attention_norm(x), query_mask=present, relations=relations, return_attention_scores=True
        )
        return scores


def _encoder_block(index, hyperparameters):
    prefix = f"encoder_block_{index}_"
    hidden_dim, dropout = hyperparameters["hidden_dim"], hyperparameters["dropout"]
    return GraphEncoderBlock(
        attention_norm=keras.layers.LayerNormalization(epsilon=1e-6, name=prefix + "attention_norm"),
        attention=RelationalAttention(
            num_heads=hyperparameters["num_heads"],
            key_dim=hidden_dim // hyperparameters["num_heads"],
            num_relations=hyperparameters["num_relations"],
            add_relative_bias=hyperparameters["add_relative_bias"],
            heads_share_relative_embedding=hyperparameters["heads_share_relative_embedding"],
            dropout=dropout,
            check_relations=hyperparameters["check_inputs"],
            name=prefix + "attention",
        ),
        dropout=keras.layers.Dropout(dropout, name=prefix + "dropout"),
        feedforward_norm=keras.layers.LayerNormalization(epsilon=1e-6, name=prefix + "feedforward_norm"),
        feedforward=keras.layers.Dense(
            hyperparameters["feedforward_dim"], activation="relu", name=prefix + "feedforward"
        ),
        output=keras.layers.Dense(hidden_dim, name=prefix + "output"),
    )


@keras.saving.register_keras_serializable(package="keras_selfattn")
class GraphTransformer(FamilyModel):
    """A pre-norm Transformer encoder over graphs.

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
        vocabulary_size: number of token ids (>= 2), id 0 the padding.
        num_relations: number of relation types (>= 1).
        num_layers: encoder blocks.
        hidden_dim: width of the model.
        num_heads: attention heads (`key_dim = hidden_dim / num_heads`).
        feedforward_dim: width of each block's feedforward layer.
        dropout: dropout rate of attention and residual branches.
        add_relative_bias: whether each block learns a logit bias per head
            and relation (`RelationalAttention`).
        heads_share_relative_embedding: whether one relation table serves
            every head.
        check_inputs: whether token and relation ids are checked; `False`
            runs unchecked, and with XLA where Keras chooses it (an unknown
            relation id then adds no relation term; keep token ids in range).
        **kwargs: `name` and the other arguments of `keras.Model`.

    Example:

    >>> import numpy as np
    >>> model = GraphTransformer.from_preset("tiny", vocabulary_size=9, num_relations=3, num_layers=1)
    >>> inputs = {"token_ids": np.array([[3, 4, 0]]), "relations": np.ones((1, 3, 3), "int32")}
    >>> tuple(model(inputs).shape)
    (1, 3, 32)

    References:
        Hellendoorn et al. 2020, https://openreview.net/forum?id=B1lnbRNtwr
    """

    builder_name = "graph_transformer"
    family = "graph"

    def __init__(
        self,
        vocabulary_size,
        num_relations,
        num_layers,
        hidden_dim,
        num_heads,
        feedforward_dim,
        dropout=0.0,
        add_relative_bias=True,
        heads_share_relative_embedding=True,
        check_inputs=True,
        **kwargs,
    ):
        hyperparameters = dict(
            vocabulary_size=vocabulary_size, num_relations=num_relations, num_layers=num_layers,
            hidden_dim=hidden_dim, num_heads=num_heads, feedforward_dim=feedforward_dim, dropout=dropout,
            add_relative_bias=add_relative_bias, heads_share_relative_embedding=heads_share_relative_embedding,
            check_inputs=check_inputs,
        )
        check_graph_hyperparameters(hyperparameters)
        self.token_embedding = keras.layers.Embedding(vocabulary_size, hidden_dim, name="token_embedding")
        self.encoder_blocks = [_encoder_block(index, hyperparameters) for index in range(num_layers)]
        self.encoder_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")

        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        relations = keras.Input((None, None), dtype="int32", name="relations")
        x, present = self._embed(token_ids)
        for block in self.encoder_blocks:
            x = block(x, present, relations)
        encodings = ops.cast(self.encoder_norm(x), "float32")
        kwargs.setdefault("name", "graph_transformer")
        super().__init__(
            {"token_ids": token_ids, "relations": relations}, encodings, hyperparameters=hyperparameters,
            **kwargs,
        )
        self.vocabulary_size = vocabulary_size
        self.num_relations = num_relations
        self.checks_inputs = check_inputs

    def _embed(self, token_ids):
        """`(token embeddings, present)`: `present` is True on real nodes."""
        present = ops.not_equal(token_ids, 0)
        return self.token_embedding(token_ids), present

    def attention_scores(self, token_ids, relations, block=-1):
        """`[batch, heads, nodes, nodes]` attention probabilities of encoder
        block `block` (an index, negative counting from the last)."""
        token_ids = self._checked_inputs({"token_ids": token_ids})["token_ids"]
        target = self.encoder_blocks[block]
        x, present = self._embed(token_ids)
        for candidate in self.encoder_blocks:
            if candidate is target:
                return target.attention_scores(x, present, relations)
            x = candidate(x, present, relations)

    _check_switch = "check_inputs"

    def _input_bounds(self):
        if not self.checks_inputs:
            return {}
        return {"token_ids": ("token id", self.vocabulary_size)}

def check_graph_hyperparameters(hyperparameters):
    """`ValueError` naming the first hyperparameter of a graph encoder that
    no model can have."""
    check_vocabulary_size("vocabulary_size", hyperparameters["vocabulary_size"])
    for name in ("num_relations", "num_layers", "hidden_dim", "num_heads", "feedforward_dim"):
        check_positive_int(name, hyperparameters[name])
    check_divisible_width(hyperparameters["hidden_dim"], hyperparameters["num_heads"])
    if not 0.0 <= hyperparameters["dropout"] < 1.0:
        raise ValueError(f"`dropout` must lie in [0, 1). Received: dropout={hyperparameters['dropout']!r}")
    for name in ("add_relative_bias", "heads_share_relative_embedding", "check_inputs"):
        if not isinstance(hyperparameters[name], bool):
            raise ValueError(f"`{name}` must be True or False. Received: {name}={hyperparameters[name]!r}")


def graph_transformer(
    vocabulary_size=None, num_relations=None, preset="base", check_inputs=True, **overrides
):
    """A `GraphTransformer` of architecture preset `preset` (`"base"`,
    `"small"` or `"tiny"`), its hyperparameters replaced by `overrides` (the
    constructor's arguments). `vocab_size=` is the old name of
    `vocabulary_size`."""
    vocabulary_size = renamed_argument(overrides, "vocab_size", "vocabulary_size", vocabulary_size)
    config = resolve_preset("graph_transformer", GRAPH_PRESETS, preset, overrides)
    return GraphTransformer(
        vocabulary_size=vocabulary_size, num_relations=num_relations, check_inputs=check_inputs, **config
    )


register_presets(GraphTransformer, GRAPH_PRESETS, builder="graph_transformer")
