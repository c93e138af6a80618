"""The decoder stack of the sequence models, shared by their Functional
forward pass and by cached one-step decoding.

Builders name their layers `target_embedding`, `target_position` (absent
without an absolute position signal), `note_state` (music models that embed
the sounding notes), `decoder_block_{i}`, `decoder_norm` (pre-norm models)
and `logits`; encoder-decoder models add `source_embedding`,
`source_position`, `encoder_block_{i}` and `encoder_norm`. A cached step reuses
exactly those layers, so a loop of steps equals the full forward pass. One
embedding shared by source and target is one layer, `source_embedding`;
`layers_by_name` lists it as `target_embedding` too.
"""

import math

import keras
from keras import ops


def embed_tokens(embedding, tokens, position=None, cache_update_index=0):
    """Token embeddings scaled by `sqrt(width)`, plus the position signal."""
    x = embedding(tokens)
    # A Python float, not a constant cast to the compute dtype: a bfloat16
    # constant in a Functional graph cannot be saved to `.keras`.
    x = x * math.sqrt(x.shape[-1])
    if position is not None:
        x = x + position(x, cache_update_index=cache_update_index)
    return x


def embed_targets(layers, tokens, note_cache=None, cache_update_index=0):
    """`(decoder input, note cache)`: the target tokens' embeddings and
    position signal, plus the sounding notes' embedding where the model has
    a `note_state` layer. With a `note_cache` (its cache, which
    that layer reads) it is returned updated; otherwise `None` comes back."""
    x = embed_tokens(layers["target_embedding"], tokens, layers.get("target_position"), cache_update_index)
    note_state = layers.get("note_state")
    if note_state is None:
        return x, note_cache
    if note_cache is None:
        return x + note_state(tokens), None
    notes, note_cache = note_state(tokens, cache=note_cache, cache_update_index=cache_update_index)
    return x + notes, note_cache


def layers_by_name(model):
    """The model's layers as a `{name: layer}` dict, the form the functions
    below take (the builders pass the same dict before the model exists).

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


def initial_caches(layers, batch_size, max_length):
    """One zero self-attention cache per decoder block,
    `[batch, 2, max_length, num_heads, key_dim]` each, then, where the model
    has a `note_state` layer, its cache (each pitch's latest note-on and
    note-off position, int32 `[batch, 2, num_pitches]`)."""
    caches = []
    for block in numbered_layers(layers, "decoder_block_"):
        caches.append(block.self_attention.initial_cache(batch_size, max_length))
    if "note_state" in layers:
        caches.append(layers["note_state"].initial_cache(batch_size))
    return caches


def encode(layers, source_tokens, pad_id=0):
    """Encoder outputs and source padding mask of an encoder-decoder model."""
    padding_mask = ops.not_equal(source_tokens, pad_id)
    x = embed_tokens(layers["source_embedding"], source_tokens, layers.get("source_position"))
    for block in numbered_layers(layers, "encoder_block_"):
        x = block(x, padding_mask=padding_mask)
    norm = layers.get("encoder_norm")
    return (x if norm is None else norm(x)), padding_mask


def decoder_logits(
    layers,
    tokens,
    caches=None,
    cache_update_index=None,
    encoder_outputs=None,
    encoder_padding_mask=None,
):
    """Logits of the decoder for `tokens` at positions from `cache_update_index`.

    Without caches this is the model's full forward pass over the decoder.
    With caches (from `initial_caches`) it is one cached step (or a prefill
    of several positions) and returns `(logits, new_caches)`.
    """
    note_cache = caches[-1] if caches is not None and "note_state" in layers else None
    x, note_cache = embed_targets(
        layers, tokens, note_cache, 0 if cache_update_index is None else cache_update_index
    )
    cross = {}
    if encoder_outputs is not None:
        cross = dict(encoder_outputs=encoder_outputs, encoder_padding_mask=encoder_padding_mask)
    new_caches = []
    for index, block in enumerate(numbered_layers(layers, "decoder_block_")):
        if caches is None:
            x = block(x, **cross)
            continue
        x, cache = block(x, cache=caches[index], cache_update_index=cache_update_index, **cross)
        new_caches.append(cache)
    norm = layers.get("decoder_norm")
    logits = layers["logits"](x if norm is None else norm(x))
    if caches is None:
        return logits
    return logits, new_caches + ([] if note_cache is None else [note_cache])


def output_layer(vocab_size):
    """The vocabulary projection; float32 so logits stay exact under mixed precision."""
    return keras.layers.Dense(vocab_size, dtype="float32", name="logits")
