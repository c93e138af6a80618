"""Multi-head attention with learned relative-position terms."""

import keras
from keras import ops

from keras_selfattn.layers.argument_checks import check_optional_bool, check_positive_int
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.relation_layer_checks import (
    check_no_flash_attention,
    check_sequence_attention,
)
from keras_selfattn.layers.relation_table_weights import add_relation_table, initializer_config
from keras_selfattn.ops.masks import causal_mask, merge_masks
from keras_selfattn.ops.relative import (
    causal_relative_logits,
    gather_relative_logits,
    relative_distances,
    relative_table_window,
    shaw_row_distances,
    shaw_table_rows,
    shaw_table_window,
    skew,
    skew_row_distances,
    skew_table_rows,
    sum_weights_by_distance,
    unskew,
    unskew_causal_square,
)
from keras_selfattn.ops.relation_tables import (
    broadcast_table,
    dot_table_rows,
    heads_first,
    weigh_table_rows,
)
from keras_selfattn.ops.attention import single_query_probabilities, weigh_values_in_place
from keras_selfattn.ops.softmax_attention import attention_with_weights, softmax_attention

RELATIVE_TYPES = ("skew", "shaw")


@keras.saving.register_keras_serializable(package="keras_selfattn")
class RelativeMultiHeadAttention(MultiHeadAttention):
    """Multi-head self-attention with relative-position logits (and values).

    Everything `MultiHeadAttention` has (projections and weight layout
    `query`, `key`, `value`, `attention_output`; the static KV cache; masks;
    `attention_bias`), plus a learned term per query-key distance `j - i`
    (key position minus query position) added to the content logits before
    the `1 / sqrt(key_dim)` scaling:
    `logits[i, j] = (q_i . k_j + q_i . a^K(j - i)) / sqrt(key_dim)`, and with
    a value table `z_i = sum_j alpha_ij (v_j + a^V(j - i))`.

    `relative_type="skew"` (Music Transformer, Huang et al. 2019):

    - `relative_key_embeddings` has shape `(num_heads, rows, key_dim)`, or
      `(rows, key_dim)` when `heads_share_relative_embedding=True`; the value
      table `relative_value_embeddings` the same with `value_dim`.
    - Row `r` stands for distance `r - (max_relative_position - 1)`:
      `rows = 2 * max_relative_position - 1` (distances `-(M-1) .. M-1`), or
      with `causal_table=True` `rows = max_relative_position` (distances
      `-(M-1) .. 0`, the last row is distance 0).
    - Distances beyond the table get no relative term (no clipping).

    `relative_type="shaw"` (Shaw et al. 2018):

    - Distances are clipped to `[-k, k]`, `k = max_relative_position`.
    - `relative_key_embeddings` and `relative_value_embeddings` have shape
      `(rows, key_dim)` and `(rows, value_dim)`, shared by the heads
      (`(num_heads, rows, dim)` with `heads_share_relative_embedding=False`);
      row `r` stands for clipped distance `r - k`: `rows = 2k + 1`, or with
      `causal_table=True` `rows = k + 1` (clipped distances `-k .. 0`).

    How it is computed: a full pass forms `query . table^T` for one table row
    per distance and moves it to the `[query, key]` layout with a skew
    (memory O(L d) for the rows, O(L^2) for the logits, never a
    `[L, L, dim]` tensor); the logits go to the attention core
    `keras_selfattn.ops.softmax_attention` as its bias. A causal pass (the
    usual one) forms its relative logits with
    `keras_selfattn.ops.relative.causal_relative_logits` (no tensor larger than the
    logits), hands the value rows to the attention core (which differentiates
    them with the rest) and needs only the table rows that hold a term:
    Shaw rows are taken relative to the farthest one (softmax ignores a
    per-query constant), so only the `k` nearest distances cost anything.
    Unknown lengths (`keras.Input((None, d))`) take the same path. With a
    cache, query row `i` stands at position `cache_update_index + i` and its
    relative rows are read per query-key pair (no skew), so a loop of
    one-step calls equals the full causal pass.

    Segment memory (Transformer-XL, `memory` `[batch, M, features]`): the
    memory's keys and values go in front of the segment's (no gradient) and
    query `i` stands at position `M + i`, so distances run over key length
    `M + L`. The skew then shifts `query . table^T` over those distances
    (`causal_relative_logits(..., memory_length=M)`, the rows of distances
    `-(min(M + L, max_relative_position) - 1) .. 0`, or every distance
    `-(M + L - 1) .. L - 1` unmasked): still no `[L, M + L, dim]` tensor.
    Shaw's rows are read per query-key pair, as in a cached call.

    Shapes: `query` `[batch, query_length, query_dim]`, `value` and `key`
    `[batch, key_length, dim]`; query row `i` is position `i` and key `j`
    position `j` (offset by `cache_update_index` for the queries).

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        max_relative_position: `M` for "skew" (distances `-(M-1) .. M-1`
            have rows), the clipping distance `k` for "shaw". An integer >= 1.
        relative_type: `"skew"` or `"shaw"`.
        heads_share_relative_embedding: whether one table serves every head.
            `None`: `False` for "skew", `True` for "shaw".
        add_relative_to_values: whether a value table is learned too.
            `None`: `False` for "skew", `True` for "shaw".
        causal_table: whether the tables hold only distances `<= 0` (decoder
            self-attention): such a layer is causal, `use_causal_mask`
            defaults to `True` and `False` is an error.
        relative_embeddings_initializer: initializer of the tables; `None`
            is a normal distribution with standard deviation `key_dim**-0.5`.
        **kwargs: the other `MultiHeadAttention` arguments (`value_dim`,
            `dropout`, `use_bias`, `output_shape`, `sliding_window`,
            `use_gate`, initializers, ...). `attention_axes` must stay the
            single sequence axis; `flash_attention` must be `None` (the layer
            forms its logits itself, there is no fused kernel to use).

    Call arguments:
        Those of `MultiHeadAttention`: `query`, `value` (defaults to
        `query`), `key` (defaults to `value`), `query_mask`, `value_mask`,
        `key_mask`, `attention_mask`, `attention_bias`, `cache`
        (`[batch, 2, max_length, num_heads, key_dim]`), `cache_update_index`
        (required with a cache), `return_attention_scores`, `training`,
        `use_causal_mask`: `None` (the default) is `causal_table`, and
        `memory`: optional `[batch, memory_length, query_dim]`, the previous
        segment's inputs to this layer, used as extra keys and values in
        front of the segment's, without gradient (self-attention only, no
        cache). Query `i` stands at position `memory_length + i`; causally it
        sees every memory position and the segment up to itself. Padding
        masks, `attention_mask` and `attention_bias` cover the segment's keys;
        memory positions are all visible. The output equals the last rows of
        the layer over `concatenate([memory, query], axis=1)`.

    Returns:
        As `MultiHeadAttention`: `output` `[batch, query_length, output_dim]`,
        then the scores `[batch, num_heads, query_length, key_length]` if
        requested, then the updated cache if one was given.

    Example:

    >>> import numpy as np
    >>> layer = RelativeMultiHeadAttention(
    ...     num_heads=2, key_dim=4, max_relative_position=3, causal_table=True)
    >>> x = np.random.rand(1, 5, 8).astype("float32")
    >>> full = layer(x)  # causal: the table has no rows for future keys
    >>> tuple(layer.relative_key_embeddings.shape)
    (2, 3, 4)
    >>> cache = np.zeros((1, 2, 5, 2, 4), "float32")
    >>> for t in range(5):
    ...     step, cache = layer(x[:, t:t + 1], cache=cache, cache_update_index=t)
    >>> bool(np.allclose(step[:, 0], full[:, -1], atol=1e-5))
    True

    With `causal_table=False` the layer attends both ways unless asked:

    >>> encoder = RelativeMultiHeadAttention(
    ...     num_heads=2, key_dim=4, max_relative_position=2, relative_type="shaw")
    >>> both_ways, causal = encoder(x), encoder(x, use_causal_mask=True)
    >>> bool(np.allclose(both_ways[:, -1], causal[:, -1], atol=1e-6))  # sees every key
    True
    >>> bool(np.allclose(both_ways[:, 0], causal[:, 0], atol=1e-6))
    False

    Segment memory: the segment after 3 positions attends to them too.

    >>> segment = layer(x[:, 3:], memory=x[:, :3])
    >>> bool(np.allclose(segment, full[:, 3:], atol=1e-5))
    True

    References:
        - [Shaw et al., 2018](https://arxiv.org/abs/1803.02155)
        - [Huang et al., 2019 (Music Transformer)](https://arxiv.org/abs/1809.04281)
    """

    _forms_own_logits = True
    _attends_memory = True

    def __init__(
        self,
        num_heads,
        key_dim,
        max_relative_position,
        relative_type="skew",
        heads_share_relative_embedding=None,
        add_relative_to_values=None,
        causal_table=False,
        relative_embeddings_initializer=None,
        **kwargs,
    ):
        _check_constructor_kwargs(type(self).__name__, kwargs)
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        if relative_type not in RELATIVE_TYPES:
            raise ValueError(
                f"`relative_type` must be one of {RELATIVE_TYPES}. "
                f"Received: relative_type={relative_type!r}"
            )
        self.max_relative_position = check_positive_int("max_relative_position", max_relative_position)
        self.relative_type = relative_type
        self.heads_share_relative_embedding = check_optional_bool(
            "heads_share_relative_embedding", heads_share_relative_embedding
        )
        self.add_relative_to_values = check_optional_bool(
            "add_relative_to_values", add_relative_to_values
        )
        if not isinstance(causal_table, bool):
            raise ValueError(
                f"`causal_table` must be True or False. Received: causal_table={causal_table!r}"
            )
        self.causal_table = causal_table
        self.relative_embeddings_initializer = relative_embeddings_initializer
        self.relative_key_embeddings = None
        self.relative_value_embeddings = None

    @property
    def _is_shaw(self):
        return self.relative_type == "shaw"

    @property
    def _shares_tables(self):
        if self.heads_share_relative_embedding is None:
            return self._is_shaw
        return self.heads_share_relative_embedding

    @property
    def _has_value_table(self):
        if self.add_relative_to_values is None:
            return self._is_shaw
        return self.add_relative_to_values

    @property
    def num_relative_rows(self):
        """Rows of each relative table."""
        m = self.max_relative_position
        if self._is_shaw:
            return m + 1 if self.causal_table else 2 * m + 1
        return m if self.causal_table else 2 * m - 1

    def build(self, query_shape, value_shape=None, key_shape=None):
        check_sequence_attention("Relative", query_shape, self.attention_axes)
        super().build(query_shape, value_shape, key_shape)
        self.relative_key_embeddings = self._add_table("relative_key_embeddings", self.key_dim)
        if self._has_value_table:
            self.relative_value_embeddings = self._add_table(
                "relative_value_embeddings", self.value_dim
            )

    def _add_table(self, name, depth):
        return add_relation_table(self, name, self.num_relative_rows, depth, self._shares_tables)

    def _check_cache(self, cache, query, cache_update_index):
        super()._check_cache(cache, query, cache_update_index)
        if cache_update_index is None:
            raise ValueError(
                "Relative attention with a `cache` needs `cache_update_index`, "
                "the position of the first query row. Received: "
                "cache_update_index=None"
            )

    def _resolve_use_causal_mask(self, use_causal_mask):
        if use_causal_mask is None:
            return self.causal_table
        if self.causal_table and not use_causal_mask:
            raise ValueError(
                f"This {type(self).__name__} has `causal_table=True` (its tables "
                "hold no rows for future keys), so it is causal: "
                "`use_causal_mask` must be True or None. "
                f"Received: use_causal_mask={use_causal_mask!r}"
            )
        return bool(use_causal_mask)

    def _compute_attention_with_context(self, query, key, value, call):
        """Relative attention over projected `[batch, length, heads, dim]`
        tensors: `(output [batch, query, heads, value_dim], scores or None)`.

        `call.attention_mask` holds the padding and explicit masks; query
        row `i` stands at position `call.cache_update_index + i` (`None`: 0).
        """
        # Scaling the query scales content and relative logits together.
        query = ops.multiply(query, ops.cast(self.logit_scale, query.dtype))
        if self._is_single_step(query, call):
            return self._single_step_pass(
                query, key, value, call.attention_mask, call.attention_bias,
                call.return_attention_scores, call.cache_update_index, call.use_causal_mask,
            )
        query, key, value = (heads_first(x) for x in (query, key, value))
        common = (
            call.attention_mask, call.attention_bias, call.training, call.return_attention_scores
        )
        if call.memory is not None:
            output, scores = self._memory_pass(
                query, key, value, *common, ops.shape(call.memory)[1], call.use_causal_mask
            )
        elif call.cache_update_index is not None:
            output, scores = self._pairwise_pass(
                query, key, value, *common, call.cache_update_index, call.use_causal_mask
            )
        elif call.use_causal_mask:
            output, scores = self._causal_pass(query, key, value, *common)
        else:
            output, scores = self._bidirectional_pass(query, key, value, *common)
        return heads_first(output), scores

    def _is_single_step(self, query, call):
        return (
            call.cache_update_index is not None
            and query.shape[1] == 1
            and self._attention_dropout(call.training) is None
        )

    def _memory_pass(
        self, query, key, value, mask, bias, training, return_attention_scores, memory_length,
        use_causal_mask,
    ):
        """A full pass over a segment whose keys and values start with
        `memory_length` memory positions (queries at `memory_length + i`):
        the skew over key length `memory_length + L`; Shaw's rows are read
        per query-key pair, as in a cached call."""
        if self._is_shaw:
            return self._pairwise_pass(
                query, key, value, mask, bias, training, return_attention_scores, memory_length,
                use_causal_mask,
            )
        common = (query, key, value, mask, bias, training, return_attention_scores)
        if use_causal_mask:
            return self._causal_pass(*common, memory_length=memory_length)
        return self._bidirectional_pass(*common, memory_length=memory_length)

    def _causal_pass(
        self, query, key, value, mask, bias, training, return_attention_scores, memory_length=None
    ):
        """A full causal pass: the skew (`causal_relative_logits`) and the
        value rows in the attention core keep every tensor within
        `[query, key]`. With `memory_length` (skew tables only) the queries
        stand at `memory_length + i` and the value term is summed per table
        row (`_pairwise_value_term`)."""
        length, key_length = ops.shape(query)[2], ops.shape(key)[2]
        offset = 0 if memory_length is None else memory_length
        count, key_rows, _ = self._causal_rows(self.relative_key_embeddings, length + offset)
        key_rows = broadcast_table(ops.cast(key_rows, query.dtype), len(query.shape))
        relative = causal_relative_logits(query, key_rows, key_length, offset)
        if bias is not None:
            relative = relative + ops.cast(bias, "float32")
        mask = merge_masks(mask, causal_mask(length, key_length, offset))
        if memory_length is not None and self.relative_value_embeddings is not None:
            output, scores, weights = self._attention_core(
                query, key, value, relative, mask, training, return_attention_scores, True
            )
            return output + self._pairwise_value_term(weights, length, memory_length), scores
        value_rows = None
        if self.relative_value_embeddings is not None:
            _, value_rows, value_base = self._causal_rows(
                self.relative_value_embeddings, length, count
            )
            value_rows = ops.cast(value_rows, value.dtype)
            if value_base is not None:  # Every key's weight also goes to the base row.
                value = value + broadcast_table(ops.cast(value_base, value.dtype), len(value.shape))
        if not return_attention_scores:
            core_rows = None if value_rows is None else broadcast_table(value_rows, len(value.shape))
            dropout = self._attention_dropout(training)
            return softmax_attention(query, key, value, relative, mask, dropout, core_rows), None
        output, scores, weights = self._attention_core(
            query, key, value, relative, mask, training, True, value_rows is not None
        )
        if value_rows is not None:
            output = output + weigh_table_rows(unskew_causal_square(weights, count), value_rows)
        return output, scores

    def _causal_rows(self, table, length, count=None):
        """`(count, rows, base)`: the table rows of distances `-(count-1) .. 0`
        less `base`, and `base` (`None`: zero).

        Only rows that differ from `base` need a product with the queries, so
        `count` stops there (or at the `length` distances a query can see).
        Skew tables have no term beyond their rows. A Shaw table's farthest
        row serves every farther distance; relative to it (a constant per
        query, which softmax ignores, and the weights' total times it for the
        values) its `k` nearest rows are all there is.
        """
        m = self.max_relative_position
        if count is None:
            count = min(m, length) if isinstance(length, int) else ops.minimum(m, length)
        if not self._is_shaw:
            return count, relative_table_window(table, 1 - count, count, m), None
        base = table[..., :1, :]
        return count, shaw_table_window(table, 1 - count, count, m) - base, base

    def _bidirectional_pass(
        self, query, key, value, mask, bias, training, return_attention_scores, memory_length=None
    ):
        """A full pass without the causal mask: the skew of every distance
        `-(M + Lq - 1) .. Lk - M - 1`, queries at `M + i`
        (`M = memory_length`, `None`: 0)."""
        query_length, key_length = ops.shape(query)[2], ops.shape(key)[2]
        count = query_length + key_length - 1
        # Columns start at the farthest distance back, that of query 0 at
        # position M to key 0; the skew then only depends on the layout.
        farthest = query_length if memory_length is None else query_length + memory_length
        key_rows = self._table_window(self.relative_key_embeddings, farthest, count)
        dots = ops.cast(dot_table_rows(query, ops.cast(key_rows, query.dtype)), "float32")
        relative = skew(dots, key_length)
        output, scores, weights = self._attend_with_relative_logits(
            query, key, value, relative, bias, mask, training, return_attention_scores
        )
        value_table = self.relative_value_embeddings
        if value_table is not None:
            value_rows = self._table_window(value_table, farthest, count)
            output = output + weigh_table_rows(unskew(weights), ops.cast(value_rows, weights.dtype))
        return output, scores

    def _table_window(self, table, query_length, count):
        """Table rows for distances `-(query_length - 1) ..`, `count` of them:
        zero beyond a skew table, the clipped rows of a Shaw table."""
        window = relative_table_window if not self._is_shaw else shaw_table_window
        return window(table, 1 - query_length, count, self.max_relative_position)

    def _pairwise_pass(
        self, query, key, value, mask, bias, training, return_attention_scores, cache_update_index,
        use_causal_mask,
    ):
        """A cached call: each query-key pair reads its table row (queries at
        positions `cache_update_index + i`), no skew."""
        query_length, key_length = ops.shape(query)[2], ops.shape(key)[2]
        if use_causal_mask:
            causal = causal_mask(query_length, key_length, cache_update_index)
            mask = merge_masks(mask, causal[None, None])
        relative = self._pairwise_relative_logits(query, key_length, cache_update_index)
        output, scores, weights = self._attend_with_relative_logits(
            query, key, value, relative, bias, mask, training, return_attention_scores
        )
        if self.relative_value_embeddings is not None:
            output = output + self._pairwise_value_term(weights, query_length, cache_update_index)
        return output, scores

    def _single_step_pass(
        self, query, key, value, mask, bias, return_attention_scores, cache_update_index,
        use_causal_mask,
    ):
        """`_pairwise_pass` for one query position without dropout (a decoding
        step), on `[batch, length, heads, dim]` tensors: the cached keys and
        values are read in place, not transposed to heads-first."""
        key_length = ops.shape(key)[1]
        if use_causal_mask:
            mask = merge_masks(mask, causal_mask(1, key_length, cache_update_index)[None, None])
        relative = self._pairwise_relative_logits(heads_first(query), key_length, cache_update_index)
        if bias is not None:
            relative = relative + ops.cast(bias, "float32")
        weights = ops.cast(single_query_probabilities(query, key, relative, mask), value.dtype)
        output = weigh_values_in_place(weights, value)
        if self.relative_value_embeddings is not None:
            output = output + heads_first(self._pairwise_value_term(weights, 1, cache_update_index))
        return output, (weights if return_attention_scores else None)

    def _pairwise_relative_logits(self, query, key_length, cache_update_index):
        """float32 `[batch, heads, query, key]` relative logits of heads-first
        queries at positions `cache_update_index + i`, each pair reading the
        key table's row of its distance."""
        distances = relative_distances(ops.shape(query)[2], key_length, cache_update_index)
        dots = ops.cast(
            dot_table_rows(query, ops.cast(self.relative_key_embeddings, query.dtype)), "float32"
        )
        if self._is_shaw:
            rows = ops.minimum(
                shaw_table_rows(distances, self.max_relative_position), self.num_relative_rows - 1
            )
            return gather_relative_logits(dots, rows)
        rows, valid = skew_table_rows(distances, self.max_relative_position, self.num_relative_rows)
        return ops.where(valid, gather_relative_logits(dots, rows), 0.0)

    def _pairwise_value_term(self, weights, query_length, cache_update_index):
        """`[batch, heads, query, value_dim]`: the value table's rows weighed by
        the attention weights of their distances."""
        if self._is_shaw:
            low, high = shaw_row_distances(self.max_relative_position, self.num_relative_rows)
        else:
            low, high = skew_row_distances(self.max_relative_position, self.num_relative_rows)
        positions = ops.arange(query_length, dtype="int32") + ops.cast(cache_update_index, "int32")
        # Differences of cumulative sums: kept in float32 under mixed precision.
        by_row = sum_weights_by_distance(ops.cast(weights, "float32"), positions, low, high)
        value_table = self.relative_value_embeddings
        return weigh_table_rows(ops.cast(by_row, weights.dtype), ops.cast(value_table, weights.dtype))

    def _attend_with_relative_logits(
        self, query, key, value, relative, bias, mask, training, return_attention_scores
    ):
        """`_attention_core` with the relative logits plus the user's `bias`,
        keeping the weights when the relative value table needs them."""
        if bias is not None:
            relative = relative + ops.cast(bias, "float32")
        return self._attention_core(
            query, key, value, relative, mask, training, return_attention_scores,
            self.relative_value_embeddings is not None,
        )

    def _attention_core(self, query, key, value, bias, mask, training, return_attention_scores, need_weights):
        """The attention core on `[batch, heads, length, dim]` tensors:
        `(output, scores or None, weights or None)`; the weights (dropped out
        probabilities) when a relative value term needs them."""
        dropout = self._attention_dropout(training)
        return attention_with_weights(
            query, key, value, bias, mask, dropout, return_attention_scores, need_weights
        )

    def get_config(self):
        config = super().get_config()
        initializer = initializer_config(self.relative_embeddings_initializer)
        config.update(
            {
                "max_relative_position": self.max_relative_position,
                "relative_type": self.relative_type,
                "heads_share_relative_embedding": self.heads_share_relative_embedding,
                "add_relative_to_values": self.add_relative_to_values,
                "causal_table": self.causal_table,
                "relative_embeddings_initializer": initializer,
            }
        )
        return config


def _check_constructor_kwargs(layer_name, kwargs):
    check_no_flash_attention(layer_name, kwargs.get("flash_attention"), "relative")
    if "causal" in kwargs:
        raise ValueError(
            f"{layer_name} takes no `causal` argument: ask for causality at call "
            "time with `use_causal_mask`, and pass `causal_table=True` for tables "
            f"that hold only distances <= 0. Received: causal={kwargs['causal']!r}"
        )
