"""VarMisuse: find and repair a misused variable with two pointers over a
graph encoder's nodes (Allamanis et al. 2018; GREAT, Hellendoorn et al. 2020)."""

import keras
from keras import ops

from keras_selfattn.models.family_model import FamilyModel
from keras_selfattn.models.graph_transformer import GraphTransformer
from keras_selfattn.models.presets import register_presets

VARIABLE_MISUSE_PRESETS = {
    # recipes/variable_misuse.py's default sizes: relation embeddings on keys
    # and values, shared by the heads, and no per-relation logit bias.
    "small": dict(
        num_layers=4, hidden_dim=64, num_heads=4, feedforward_dim=128, dropout=0.1,
        add_relative_bias=False, heads_share_relative_embedding=True,
    ),
    "tiny": dict(
        num_layers=1, hidden_dim=16, num_heads=2, feedforward_dim=16, dropout=0.0,
        add_relative_bias=False, heads_share_relative_embedding=True,
    ),
}

POINTERS = ("bug", "repair")

# A padded node's pointer logit: no position the softmax can choose.
_PADDING_LOGIT = -1e9


@keras.saving.register_keras_serializable(package="keras_selfattn")
class VariableMisuseModel(FamilyModel):
    """Two pointers over the nodes of a `GraphTransformer`: the bug and its repair.

    Inputs `{"token_ids": [batch, nodes], "relations": [batch, nodes,
    nodes]}` as `GraphTransformer` takes them (node 0 is the no-bug slot);
    outputs `{"bug": [batch, nodes], "repair": [batch, nodes]}`, float32
    logits over the nodes, padded nodes at -1e9: `bug` points at the misused
    variable (0: none), `repair` at any node holding the right variable.
    Train `repair` with `keras_selfattn.models.losses.repair_loss` and `bug`
    with a sparse categorical cross-entropy from logits.

    Args:
        vocabulary_size, num_relations, num_layers, hidden_dim, num_heads,
        feedforward_dim, dropout, add_relative_bias,
        heads_share_relative_embedding, check_inputs: the graph encoder's
            (`GraphTransformer`).
        **kwargs: `name` and the other arguments of `keras.Model`.

    Example:

    >>> import numpy as np
    >>> model = VariableMisuseModel.from_preset("tiny", vocabulary_size=9, num_relations=3)
    >>> inputs = {"token_ids": np.array([[1, 4, 5, 0]]), "relations": np.zeros((1, 4, 4), "int32")}
    >>> {name: tuple(logits.shape) for name, logits in model(inputs).items()}
    {'bug': (1, 4), 'repair': (1, 4)}

    References:
        Allamanis et al. 2018, https://arxiv.org/abs/1711.00740; Hellendoorn
        et al. 2020, https://openreview.net/forum?id=B1lnbRNtwr
    """

    builder_name = "VariableMisuseModel"
    family = "variable_misuse"

    def __init__(
        self,
        vocabulary_size,
        num_relations,
        num_layers,
        hidden_dim,
        num_heads,
        feedforward_dim,
        dropout=0.0,
        add_relative_bias=False,
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
        self.encoder = GraphTransformer(**hyperparameters, name="graph_transformer")
        self.pointer_scores = {
            name: keras.layers.Dense(1, name=f"{name}_score") for name in POINTERS
        }
        # Identity layers name the outputs `bug` and `repair` (as the recipe's model did).
        self.pointer_outputs = {name: keras.layers.Identity(name=name) for name in POINTERS}

        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        relations = keras.Input((None, None), dtype="int32", name="relations")
        inputs = {"token_ids": token_ids, "relations": relations}
        encodings = self.encoder(inputs)
        real = ops.not_equal(token_ids, 0)
        outputs = {name: self._pointer(name, encodings, real) for name in POINTERS}
        kwargs.setdefault("name", "variable_misuse")
        super().__init__(inputs, outputs, hyperparameters=hyperparameters, **kwargs)

    def _pointer(self, name, encodings, real):
        """Logits over the nodes: one score per node, padding at -1e9."""
        scores = ops.squeeze(ops.cast(self.pointer_scores[name](encodings), "float32"), -1)
        return self.pointer_outputs[name](ops.where(real, scores, _PADDING_LOGIT))

    def attention_scores(self, token_ids, relations, block=-1):
        """The encoder's `[batch, heads, nodes, nodes]` attention
        probabilities of block `block` (`GraphTransformer.attention_scores`)."""
        return self.encoder.attention_scores(token_ids, relations, block=block)


register_presets(VariableMisuseModel, VARIABLE_MISUSE_PRESETS, builder="VariableMisuseModel.from_preset")
