"""Heads over a `GraphTransformer` that a user assembles as a Functional model."""

import keras

from keras_selfattn.models import plain_models
from keras_selfattn.models.family_model import FamilyModel


@keras.saving.register_keras_serializable(package="keras_selfattn")
class GraphHeads(FamilyModel):
    """Heads over a `GraphTransformer`: a Functional model with inputs
    `token_ids` and `relations` whose outputs are a dict of named heads
    over the encoder's node encodings, for heads that have no class of
    their own (`VariableMisuseModel` has one)."""

    builder_name = "keras_selfattn.models (heads over graph_transformer, with dict outputs)"
    wraps_user_graph = True

    @classmethod
    def _is_plain_model_of_family(cls, model):
        return plain_models.is_graph_heads(model)
