"""The arguments of one attention call, as every attention layer takes them."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class AttentionCall:
    """One call of an attention layer: the arguments of `MultiHeadAttention.call`.

    Every attention layer of this package has that one call signature; the
    hooks below it (`_attend`, `_compute_attention_with_context`) take this
    object instead of restating it. The fields are the call's parameters in
    their order, so `AttentionCall(*args, **kwargs)` binds a call's
    arguments as the call does. `memory` and `memory_mask` are keyword-only, so subclasses
    that add fields after `use_causal_mask` keep binding theirs by position.
    """

    query: object
    value: object = None
    key: object = None
    query_mask: object = None
    value_mask: object = None
    key_mask: object = None
    attention_mask: object = None
    attention_bias: object = None
    cache: object = None
    cache_update_index: object = None
    return_attention_scores: bool = False
    training: object = None
    use_causal_mask: object = None
    memory: object = dataclasses.field(default=None, kw_only=True)
    memory_mask: object = dataclasses.field(default=None, kw_only=True)

    def replace(self, **changes):
        """A copy with `changes` applied."""
        return dataclasses.replace(self, **changes)
