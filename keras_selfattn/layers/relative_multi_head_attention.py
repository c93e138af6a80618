"""Multi-head attention with learned relative-position terms."""

import keras
from keras import ops

from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.ops.relative import (
    gather_relative_logits,
    relative_distances,
    relative_table_window,
    shaw_row_distances,
    shaw_table_rows,
    skew,
    skew_masked,
    skew_row_distances,
    skew_table_rows,
    sum_weights_by_distance,
    unskew,
    unskew_masked,
)
from keras_selfattn.ops.softmax import masked_softmax

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
    - Row `r` stands for distance `r - (max_relative_position - 1)` in every
      mode. `causal=False`: `rows = 2 * max_relative_position - 1`
      (distances `-(M-1) .. M-1`). `causal=True`: `rows = max_relative_position`
      (distances `-(M-1) .. 0`, the last row is distance 0).
    - Distances beyond the table get no relative term (no clipping).
    - A full pass computes the term with the skew: memory O(L d) for the table
      rows and O(L^2) for the logits, never a `[L, L, key_dim]` tensor. The
      causal mask is applied inside the layer, so the skew's upper triangle
      cannot leak.

    `relative_type="shaw"` (Shaw et al. 2018):

    - Distances are clipped to `[-k, k]`, `k = max_relative_position`.
    - `relative_key_embeddings` and `relative_value_embeddings` have shape
      `(2k + 1, key_dim)` and `(2k + 1, value_dim)`, shared by the heads
      (`(num_heads, 2k + 1, dim)` with `heads_share_relative_embedding=False`);
      row `r` stands for clipped distance `r - k`.
    - A full pass expands the table to one (clipped) row per distance,
      `[2L - 1, dim]` (`[L, dim]` masked), and uses the same skew; a cached
      or cross-length call gathers `q . table^T` per query-key pair and sums
      the weights per clipped row. Never a `[L, L, dim]` tensor, nothing
      broadcast over batch and heads.

    With a cache, query row `i` stands at position `cache_update_index + i`
    and its relative rows are read directly (no skew), so a loop of one-step
    calls equals the full causal pass.

    Shapes: `query` `[batch, query_length, query_dim]`, `value` and `key`
    `[batch, key_length, dim]`; query row `i` is position `i` and key `j`
    position `j` (offset by `cache_update_index` for the queries).

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        max_relative_position: `M` for "skew" (distances `-(M-1) .. M-1`
            have rows), the clipping distance `k` for "shaw". At least 1.
        relative_type: `"skew"` or `"shaw"`.
        heads_share_relative_embedding: whether one table serves every head.
            `None`: `False` for "skew", `True` for "shaw".
        add_relative_to_values: whether a value table is learned too.
            `None`: `False` for "skew", `True` for "shaw".
        causal: whether the layer is masked (decoder) self-attention only:
            every call must pass `use_causal_mask=True`, and a "skew" table
            holds only the `max_relative_position` rows of distances `<= 0`.
        relative_embeddings_initializer: initializer of the tables; `None`
            is a normal distribution with standard deviation `key_dim**-0.5`.
        **kwargs: the other `MultiHeadAttention` arguments (`value_dim`,
            `dropout`, `use_bias`, `output_shape`, initializers, ...).
            `attention_axes` must stay the single sequence axis.

    Call arguments:
        Those of `MultiHeadAttention`: `query`, `value`, `key`, `query_mask`,
        `value_mask`, `key_mask`, `attention_mask`, `attention_bias`,
        `cache` (`[batch, 2, max_length, num_heads, key_dim]`),
        `cache_update_index` (required with a cache),
        `return_attention_scores`, `training`, `use_causal_mask`.

    Returns:
        As `MultiHeadAttention`: `output` `[batch, query_length, output_dim]`,
        then the scores `[batch, num_heads, query_length, key_length]` if
        requested, then the updated cache if one was given.

    Example:

    >>> import numpy as np
    >>> layer = RelativeMultiHeadAttention(
    ...     num_heads=2, key_dim=4, max_relative_position=3, causal=True)
    >>> x = np.random.rand(1, 5, 8).astype("float32")
    >>> full = layer(x, x, use_causal_mask=True)
    >>> tuple(layer.relative_key_embeddings.shape)
    (2, 3, 4)
    >>> cache = np.zeros((1, 2, 5, 2, 4), "float32")
    >>> for t in range(5):
    ...     step, cache = layer(x[:, t:t + 1], x[:, t:t + 1], cache=cache,
    ...                         cache_update_index=t, use_causal_mask=True)
    >>> bool(np.allclose(step[:, 0], full[:, -1], atol=1e-5))
    True

    References:
        - [Shaw et al., 2018](https://arxiv.org/abs/1803.02155)
        - [Huang et al., 2019 (Music Transformer)](https://arxiv.org/abs/1809.04281)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        max_relative_position,
        relative_type="skew",
        heads_share_relative_embedding=None,
        add_relative_to_values=None,
        causal=False,
        relative_embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        if not isinstance(max_relative_position, int) or max_relative_position < 1:
            raise ValueError(
                "`max_relative_position` must be an integer >= 1. "
                f"Received: max_relative_position={max_relative_position!r}"
            )
        if relative_type not in RELATIVE_TYPES:
            raise ValueError(
                f"`relative_type` must be one of {RELATIVE_TYPES}. "
                f"Received: relative_type={relative_type!r}"
            )
        self.max_relative_position = max_relative_position
        self.relative_type = relative_type
        self.heads_share_relative_embedding = heads_share_relative_embedding
        self.add_relative_to_values = add_relative_to_values
        self.causal = bool(causal)
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
        return bool(self.heads_share_relative_embedding)

    @property
    def _has_value_table(self):
        if self.add_relative_to_values is None:
            return self._is_shaw
        return bool(self.add_relative_to_values)

    @property
    def num_relative_rows(self):
        """Rows of each relative table."""
        m = self.max_relative_position
        if self._is_shaw:
            return 2 * m + 1
        return m if self.causal else 2 * m - 1

    def build(self, query_shape, value_shape, key_shape=None):
        if len(query_shape) != 3 or tuple(self._attention_axes or (1,)) != (1,):
            raise ValueError(
                "Relative attention needs sequence inputs `[batch, length, "
                "features]` and `attention_axes=None` or `(1,)`. Received: "
                f"query.shape={tuple(query_shape)}, "
                f"attention_axes={self._attention_axes}"
            )
        super().build(query_shape, value_shape, key_shape)
        self.relative_key_embeddings = self._add_table("relative_key_embeddings", self._key_dim)
        if self._has_value_table:
            self.relative_value_embeddings = self._add_table(
                "relative_value_embeddings", self._value_dim
            )

    def _add_table(self, name, depth):
        shape = (self.num_relative_rows, depth)
        if not self._shares_tables:
            shape = (self._num_heads,) + shape
        initializer = self.relative_embeddings_initializer
        if initializer is None:
            initializer = keras.initializers.RandomNormal(stddev=self._key_dim**-0.5)
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=keras.initializers.get(initializer),
        )

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        attention_bias=None,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
    ):
        self._check_relative_call(cache, cache_update_index, use_causal_mask)
        return super().call(
            query,
            value,
            key=key,
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            attention_bias=attention_bias,
            cache=cache,
            cache_update_index=cache_update_index,
            return_attention_scores=return_attention_scores,
            training=training,
            use_causal_mask=use_causal_mask,
        )

    def _check_relative_call(self, cache, cache_update_index, use_causal_mask):
        if self.causal and not use_causal_mask:
            raise ValueError(
                "This layer was built with `causal=True` (masked relative "
                "attention only), so it must be called with "
                f"`use_causal_mask=True`. Received: use_causal_mask={use_causal_mask}"
            )
        if cache is not None and cache_update_index is None:
            raise ValueError(
                "Relative attention with a `cache` needs `cache_update_index`, "
                "the position of the first query row. Received: "
                "cache_update_index=None"
            )

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        attention_bias=None,
        cache_update_index=None,
        use_causal_mask=False,
    ):
        mode = self._relative_mode(query, key, cache_update_index, use_causal_mask)
        offset = 0 if cache_update_index is None else cache_update_index
        # Scaling the query scales content and relative logits together
        # without two more passes over `[batch, heads, query, key]`.
        query = ops.multiply(query, ops.cast(self._inverse_sqrt_key_dim, query.dtype))
        logits = ops.cast(ops.einsum("btnh,bsnh->bnts", query, key), "float32")
        logits = logits + self._relative_logits(query, ops.shape(key)[1], mode, offset)
        if attention_bias is not None:
            logits = logits + ops.cast(attention_bias, "float32")
        scores = ops.cast(masked_softmax(logits, attention_mask), value.dtype)
        weights = scores
        if training and self._dropout > 0.0:
            weights = self._dropout_layer(scores, training=training)
        output = ops.einsum("bnts,bsnh->btnh", weights, value)
        if self.relative_value_embeddings is not None:
            output = output + self._relative_values(weights, mode, offset)
        return output, (scores if return_attention_scores else None)

    def _relative_mode(self, query, key, cache_update_index, use_causal_mask):
        """"masked" or "unmasked" skew for a full self-attention pass,
        "gather" (rows read per query-key pair) otherwise."""
        same_length = query.shape[1] is not None and query.shape[1] == key.shape[1]
        if cache_update_index is not None or not same_length:
            return "gather"
        return "masked" if use_causal_mask else "unmasked"

    def _relative_logits(self, query, key_length, mode, query_offset):
        """float32 relative logits `[batch, heads, query, key]` of a scaled query."""
        table = ops.cast(self.relative_key_embeddings, query.dtype)
        if mode == "gather":
            distances = relative_distances(ops.shape(query)[1], key_length, query_offset)
            dots = ops.cast(_dot_rows(query, table), "float32")
            if self._is_shaw:
                return gather_relative_logits(dots, shaw_table_rows(distances, self.max_relative_position))
            rows, valid = skew_table_rows(distances, self.max_relative_position, self.num_relative_rows)
            return ops.where(valid, gather_relative_logits(dots, rows), 0.0)
        length = ops.shape(query)[1]
        if mode == "masked":
            window = self._table_window(table, length, length)
            return skew_masked(ops.cast(_dot_rows(query, window), "float32"))
        window = self._table_window(table, length, 2 * length - 1)
        return skew(ops.cast(_dot_rows(query, window), "float32"), length)

    def _relative_values(self, weights, mode, query_offset):
        """The value term `[batch, query, heads, value_dim]`."""
        table = ops.cast(self.relative_value_embeddings, weights.dtype)
        query_length = ops.shape(weights)[-2]
        if mode == "gather":
            if self._is_shaw:
                low, high = shaw_row_distances(self.max_relative_position)
            else:
                low, high = skew_row_distances(self.max_relative_position, self.num_relative_rows)
            positions = ops.arange(query_length, dtype="int32") + ops.cast(query_offset, "int32")
            # Differences of cumulative sums: kept in float32 under mixed precision.
            by_row = sum_weights_by_distance(ops.cast(weights, "float32"), positions, low, high)
            return _weigh_rows(ops.cast(by_row, weights.dtype), table)
        if mode == "masked":
            window = self._table_window(table, query_length, query_length)
            return _weigh_rows(unskew_masked(weights), window)
        window = self._table_window(table, query_length, 2 * query_length - 1)
        return _weigh_rows(unskew(weights), window)

    def _table_window(self, table, length, count):
        """Table rows for distances `-(length - 1) .. count - length`: zero
        beyond a skew table, the clipped rows of a Shaw table."""
        if not self._is_shaw:
            return relative_table_window(table, 1 - length, count, self.max_relative_position)
        distances = ops.arange(count, dtype="int32") + (1 - length)
        return ops.take(table, shaw_table_rows(distances, self.max_relative_position), axis=-2)

    def get_config(self):
        config = super().get_config()
        initializer = self.relative_embeddings_initializer
        if initializer is not None:
            initializer = keras.initializers.serialize(keras.initializers.get(initializer))
        config.update(
            {
                "max_relative_position": self.max_relative_position,
                "relative_type": self.relative_type,
                "heads_share_relative_embedding": self.heads_share_relative_embedding,
                "add_relative_to_values": self.add_relative_to_values,
                "causal": self.causal,
                "relative_embeddings_initializer": initializer,
            }
        )
        return config


def _dot_rows(query, table):
    """`query [b, l, h, d]` dotted with table rows: `[b, h, l, rows]`."""
    if len(table.shape) == 2:
        return ops.einsum("blhd,rd->bhlr", query, table)
    return ops.einsum("blhd,hrd->bhlr", query, table)


def _weigh_rows(weights_by_row, table):
    """`weights_by_row [b, h, l, rows]` times table rows: `[b, l, h, d]`."""
    if len(table.shape) == 2:
        return ops.einsum("bhlr,rd->blhd", weights_by_row, table)
    return ops.einsum("bhlr,hrd->blhd", weights_by_row, table)
