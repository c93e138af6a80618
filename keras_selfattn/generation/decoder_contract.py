"""What the decoding loops need of a model: the cached-step contract.

Generation knows a model only through these methods and attributes, as
keras-hub's samplers know nothing of models: any object that has them can be
decoded, whatever its class.
"""

# A decoder-only model: the primer's tokens in, the next token's logits out.
CONTINUATION = ("initial_cache", "call_with_cache", "vocabulary_size", "max_length")
# An encoder-decoder model: the source encoded once, then cached target steps.
TRANSLATION = ("encode", "initial_cache", "call_with_cache", "vocabulary_size", "max_length")
# An image model: one position (sub-pixel or pixel) per cached step.
IMAGE = ("initial_cache", "call_with_cache", "image_shape", "generation_order", "is_dmol", "position_grid_shape")


def check_decoder(model, contract, example, refused=()):
    """`model` if it has every name of `contract` and none of `refused`.

    Args:
        model: the object to decode with.
        contract: the names it must have (`CONTINUATION`, `TRANSLATION`,
            `IMAGE`).
        example: the model class that keeps it, named in the error.
        refused: names that mark another contract (an encoder's `encode`
            where a decoder-only model is expected).

    Raises:
        ValueError: naming what `model` lacks or has that it should not.
    """
    missing = [name for name in contract if not hasattr(model, name)]
    extra = [name for name in refused if hasattr(model, name)]
    if missing or extra:
        name = getattr(model, "name", type(model).__name__)
        problem = f"it lacks {missing}" if missing else f"it has {extra}, which {example} has not"
        raise ValueError(
            f"`model` must keep the cached-step contract of {example} ({', '.join(contract)}); "
            f"{problem}. A plain model an earlier version saved becomes one with "
            f"`{example}.from_model(model)`. Received: model {name!r}"
        )
    return model
