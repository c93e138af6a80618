"""Multi-head attention with learned terms per relation between positions."""

import dataclasses

import keras
from keras import backend, ops

from keras_selfattn.compat import pad
from keras_selfattn.layers.argument_checks import check_positive_int, checked_in_range
from keras_selfattn.layers.attention_call import AttentionCall
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.layers.relation_layer_checks import (
    check_no_flash_attention,
    check_sequence_attention,
)
from keras_selfattn.layers.relation_table_weights import add_relation_table, initializer_config
from keras_selfattn.ops.masks import causal_mask, merge_masks
from keras_selfattn.ops.relation_graphs import (
    edge_query_logits,
    edge_relation_bias,
    edge_value_term,
    gather_relation_logits,
    scatter_edge_logits,
    sum_weights_by_relation,
    with_no_relation_row,
    without_out_of_range_edges,
    without_unknown_ids,
)
from keras_selfattn.ops.relation_tables import dot_table_rows, heads_first, weigh_table_rows
from keras_selfattn.ops.softmax_attention import attention_with_weights


@dataclasses.dataclass(frozen=True)
class RelationalAttentionCall(AttentionCall):
    """An `AttentionCall` with the call's `relations`."""

    relations: object = None


@keras.saving.register_keras_serializable(package="keras_selfattn")
class RelationalAttention(MultiHeadAttention):
    """Multi-head attention with a learned term per relation between positions.

    Everything `MultiHeadAttention` has (projections and weight layout,
    masks, `attention_bias`, the KV cache), plus `relations` at call time:
    query `i` and key `j` stand in relations `r` (edge types of a graph, a
    clipped distance, ...), and each relation adds its learned terms
    (Shaw et al.; RAT-SQL; GREAT):
    `logits[h, i, j] = q_i . (k_j + sum_r a^K_r) / sqrt(key_dim) + sum_r b_{h,r}`
    and `z_i = sum_j alpha_ij (v_j + sum_r a^V_r)`, the sums over the
    relations of the pair (none: no term).

    Relations come in one of two forms, which give the same result:

    - dense: an int tensor `[batch, query, key]` (or `[1, query, key]`,
      shared by the batch) of relation ids, `0` = no relation, `1 ..
      num_relations` a relation type;
    - sparse: an int edge list `[num_edges, 4]` of `(batch, query, key,
      relation)` rows; several edges on one pair add their terms, and an
      edge of relation 0 adds nothing (pad edge lists with zero rows). Its
      first axis counts edges, not examples: as an input of a model that
      `fit` or `predict` cut into batches, pass dense ids instead.

    Tables: `relative_key_embeddings` `(num_relations, key_dim)` and
    `relative_value_embeddings` `(num_relations, value_dim)`, row `r - 1`
    for relation id `r`, shared by the heads, or `(num_heads,
    num_relations, dim)` with `heads_share_relative_embedding=False`;
    `relative_bias` `(num_heads, num_relations)`, a scalar per head and
    relation. Dense ids `clip(j - i, -k, k) + k + 1` with `num_relations =
    2k + 1` and the same tables give `RelativeMultiHeadAttention` in its
    `"shaw"` mode.

    How it is computed: the dense form gathers each pair's logit from
    `q . table^T` (`[batch, heads, query, num_relations + 1]`) and sums the
    attention weights per relation before one product with the value
    table; the sparse form computes each edge's terms and scatters them
    (O(edges x heads x depth)). No `[batch, query, key, depth]` tensor is
    formed.

    Checks: with `check_relations=True` (the default) every relation id and
    edge index must lie in its range (ids in `[0, num_relations]`; an edge's
    batch, query and key below the batch size, query length and key
    length), else the call fails with a message naming `relations`, the
    index and its bound:

    - values known at call time (eager TensorFlow, JAX and PyTorch) raise a
      `ValueError`;
    - in a TensorFlow graph (`tf.function`, `fit`, `predict`, an exported
      SavedModel) the run fails with an `InvalidArgumentError` carrying the
      same message. XLA drops assertions, so on TensorFlow the checking
      layer reports `supports_jit = False` (Keras then runs `fit` and
      `predict` without XLA, and warns if `jit_compile=True` was asked), and
      a function compiled with `jit_compile=True` around it raises a
      `ValueError` when traced;
    - traced by `jax.jit` (JAX's `fit` and `predict`), values cannot be
      checked: they are used as with `check_relations=False`.

    With `check_relations=False` (or unchecked under `jax.jit`) nothing is
    checked and the layer compiles with XLA on every backend; an
    out-of-range id, or an edge with any index out of range, then adds no
    relation term (it never lands on another pair).

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        num_relations: the number of relation types (ids `1 ..
            num_relations`; 0 is no relation). An integer >= 1.
        add_relative_to_keys: whether a key table is learned.
        add_relative_to_values: whether a value table is learned.
        add_relative_bias: whether a per-head scalar bias per relation is
            learned. At least one of the three must be `True`.
        heads_share_relative_embedding: whether one key (and value) table
            serves every head.
        relative_embeddings_initializer: initializer of the key and value
            tables; `None` is a normal distribution with standard deviation
            `key_dim**-0.5`.
        relative_bias_initializer: initializer of `relative_bias`.
        check_relations: whether relation ids and edge indices are checked
            against their bounds at call time (see Checks above).
        **kwargs: the other `MultiHeadAttention` arguments (`value_dim`,
            `dropout`, `use_bias`, `output_shape`, `sliding_window`,
            `use_gate`, initializers, ...). `attention_axes` must stay the
            single sequence axis; `flash_attention` must be `None`.

    Call arguments:
        Those of `MultiHeadAttention` (`query`, `value`, `key`, the padding
        masks, `attention_mask`, `attention_bias`, `cache`,
        `cache_update_index`, `return_attention_scores`, `training`,
        `use_causal_mask`), and
        relations: dense `[batch or 1, query, key]` relation ids or a sparse
            `[num_edges, 4]` edge list, integers; the key axis is the
            cache's `max_length` with a cache. `None`: no relation terms.

    Returns:
        As `MultiHeadAttention`: `output` `[batch, query_length, output_dim]`,
        then the scores `[batch, num_heads, query_length, key_length]` if
        requested, then the updated cache if one was given.

    Example:

    >>> import numpy as np
    >>> layer = RelationalAttention(num_heads=2, key_dim=4, num_relations=3)
    >>> x = np.random.rand(1, 5, 8).astype("float32")
    >>> relations = np.zeros((1, 5, 5), "int32")
    >>> relations[0, 1, 0] = 2  # node 1 sees node 0 through relation 2
    >>> dense = layer(x, relations=relations)
    >>> edges = np.array([[0, 1, 0, 2]], "int32")  # (batch, query, key, relation)
    >>> bool(np.allclose(dense, layer(x, relations=edges), atol=1e-6))
    True
    >>> tuple(layer.relative_key_embeddings.shape)
    (3, 4)

    References:
        - [Shaw et al., 2018](https://arxiv.org/abs/1803.02155)
        - [Wang et al., 2020 (RAT-SQL)](https://arxiv.org/abs/1911.04942)
        - [Hellendoorn et al., 2020 (GREAT)](https://openreview.net/forum?id=B1lnbRNtwr)
    """

    _forms_own_logits = True

    def __init__(
        self,
        num_heads,
        key_dim,
        num_relations,
        add_relative_to_keys=True,
        add_relative_to_values=True,
        add_relative_bias=False,
        heads_share_relative_embedding=True,
        relative_embeddings_initializer=None,
        relative_bias_initializer="zeros",
        check_relations=True,
        **kwargs,
    ):
        check_no_flash_attention(type(self).__name__, kwargs.get("flash_attention"), "relation")
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        self.num_relations = check_positive_int("num_relations", num_relations)
        options = {
            "add_relative_to_keys": add_relative_to_keys,
            "add_relative_to_values": add_relative_to_values,
            "add_relative_bias": add_relative_bias,
            "heads_share_relative_embedding": heads_share_relative_embedding,
            "check_relations": check_relations,
        }
        for name, option in options.items():
            if not isinstance(option, bool):
                raise ValueError(f"`{name}` must be True or False. Received: {name}={option!r}")
        if not (add_relative_to_keys or add_relative_to_values or add_relative_bias):
            raise ValueError(
                "At least one of `add_relative_to_keys`, `add_relative_to_values` and "
                "`add_relative_bias` must be True, or relations change nothing."
            )
        self.add_relative_to_keys = add_relative_to_keys
        self.add_relative_to_values = add_relative_to_values
        self.add_relative_bias = add_relative_bias
        self.heads_share_relative_embedding = heads_share_relative_embedding
        self.relative_embeddings_initializer = relative_embeddings_initializer
        self.relative_bias_initializer = relative_bias_initializer
        self.check_relations = check_relations
        # XLA drops TensorFlow's assertions: Keras must not compile a checking layer with it.
        self.supports_jit = not (check_relations and backend.backend() == "tensorflow")
        self.relative_key_embeddings = None
        self.relative_value_embeddings = None
        self.relative_bias = None

    def build(self, query_shape, value_shape=None, key_shape=None):
        check_sequence_attention("Relational", query_shape, self.attention_axes)
        super().build(query_shape, value_shape, key_shape)
        if self.add_relative_to_keys:
            self.relative_key_embeddings = self._add_table("relative_key_embeddings", self.key_dim)
        if self.add_relative_to_values:
            self.relative_value_embeddings = self._add_table(
                "relative_value_embeddings", self.value_dim
            )
        if self.add_relative_bias:
            self.relative_bias = self.add_weight(
                name="relative_bias",
                shape=(self.num_heads, self.num_relations),
                initializer=keras.initializers.get(self.relative_bias_initializer),
            )

    def _add_table(self, name, depth):
        return add_relation_table(self, name, self.num_relations, depth, self.heads_share_relative_embedding)

    def call(
        self,
        query,
        value=None,
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
        use_causal_mask=None,
        relations=None,
    ):
        return self._attend(RelationalAttentionCall(
            query, value, key, query_mask, value_mask, key_mask, attention_mask,
            attention_bias, cache, cache_update_index, return_attention_scores, training,
            use_causal_mask, relations,
        ))

    def compute_output_spec(self, *args, relations=None, **kwargs):
        call = AttentionCall(*args, **kwargs)
        if relations is not None:
            key_length = (call.value if call.value is not None else call.query).shape[1]
            if call.cache is not None:
                key_length = call.cache.shape[2]
            self._check_relations_layout(relations, call.query.shape[0], call.query.shape[1], key_length)
        return super().compute_output_spec(*args, **kwargs)

    def _compute_attention_with_context(self, query, key, value, call):
        """Attention over projected `[batch, length, heads, dim]` tensors with
        the relation terms: `(output [batch, query, heads, value_dim],
        scores or None)`."""
        relations = call.relations
        if relations is None:
            return super()._compute_attention_with_context(query, key, value, call)
        batch, query_length, key_length = ops.shape(query)[0], ops.shape(query)[1], ops.shape(key)[1]
        self._check_relations_layout(relations, batch, query.shape[1], key.shape[1])
        relations = self._in_range_relations(relations, batch, query_length, key_length)
        # Scaling the query scales content and relation logits together.
        query = ops.multiply(query, ops.cast(self.logit_scale, query.dtype))
        query, key, value = (heads_first(x) for x in (query, key, value))
        dense = len(relations.shape) == 3
        if dense:
            logits = self._dense_relation_logits(query, relations)
        else:
            logits = self._edge_relation_logits(query, relations, batch, key_length)
        if call.attention_bias is not None:
            bias = ops.cast(call.attention_bias, "float32")
            logits = bias if logits is None else logits + bias
        mask = call.attention_mask
        if call.use_causal_mask:
            offset = 0 if call.cache_update_index is None else call.cache_update_index
            mask = merge_masks(mask, causal_mask(query_length, key_length, offset)[None, None])
        output, scores, weights = attention_with_weights(
            query, key, value, logits, mask, self._attention_dropout(call.training),
            call.return_attention_scores, self.relative_value_embeddings is not None,
        )
        if weights is not None:
            table = self._rows(self.relative_value_embeddings, weights.dtype)
            if dense:
                by_relation = sum_weights_by_relation(
                    ops.cast(weights, "float32"), relations, self.num_relations + 1
                )
                output = output + weigh_table_rows(ops.cast(by_relation, weights.dtype), table)
            else:
                output = output + edge_value_term(weights, table, relations)
        return heads_first(output), scores

    def _rows(self, table, dtype):
        """A table with its zero row for id 0, in `dtype`."""
        return with_no_relation_row(ops.cast(table, dtype))

    def _bias_rows(self):
        """`relative_bias` `[heads, num_relations + 1]` in float32, column 0 zero."""
        return pad(ops.cast(self.relative_bias, "float32"), [[0, 0], [1, 0]])

    def _dense_relation_logits(self, query, relations):
        """`[batch, heads, query, key]` float32 relation logits of dense ids."""
        batch, heads, query_length, _ = ops.shape(query)
        by_relation = None
        if self.relative_key_embeddings is not None:
            table = self._rows(self.relative_key_embeddings, query.dtype)
            by_relation = ops.cast(dot_table_rows(query, table), "float32")
        if self.relative_bias is not None:
            bias = self._bias_rows()[None, :, None, :]
            if by_relation is None:
                bias = ops.broadcast_to(bias, (batch, heads, query_length, self.num_relations + 1))
            by_relation = bias if by_relation is None else by_relation + bias
        if by_relation is None:
            return None
        return gather_relation_logits(by_relation, relations)

    def _edge_relation_logits(self, query, edges, batch, key_length):
        """`[batch, heads, query, key]` float32 relation logits of an edge list."""
        _, heads, query_length, _ = ops.shape(query)
        per_edge = None
        if self.relative_key_embeddings is not None:
            table = self._rows(self.relative_key_embeddings, query.dtype)
            per_edge = ops.cast(edge_query_logits(query, table, edges), "float32")
        if self.relative_bias is not None:
            bias = edge_relation_bias(self._bias_rows(), edges)
            per_edge = bias if per_edge is None else per_edge + bias
        if per_edge is None:
            return None
        return scatter_edge_logits(per_edge, edges, batch, query_length, key_length)

    def _in_range_relations(self, relations, batch, query_length, key_length):
        """int32 `relations` whose out-of-range ids and edges add nothing,
        checked first with `check_relations` (see the class docstring)."""
        dense = len(relations.shape) == 3
        if self.check_relations:
            if dense:
                limits = [("relation id", None, self.num_relations + 1)]
            else:
                names = ("batch", "query", "key", "relation")
                sizes = (batch, query_length, key_length, self.num_relations + 1)
                limits = [(f"edge {name} index", column, size) for column, (name, size)
                          in enumerate(zip(names, sizes))]
            relations = checked_in_range(relations, "relations", limits, "check_relations")
        if dense:
            return without_unknown_ids(relations, self.num_relations + 1)
        return without_out_of_range_edges(relations, batch, query_length, key_length, self.num_relations + 1)

    def _check_relations_layout(self, relations, batch, query_length, key_length):
        """`ValueError` naming `relations` for a wrong dtype, rank or shape."""
        shape = tuple(relations.shape)
        dtype = backend.standardize_dtype(relations.dtype)
        if not dtype.startswith(("int", "uint")):
            raise ValueError(
                f"`relations` must have an integer dtype. Received: relations.dtype={dtype}"
            )
        batch = batch if isinstance(batch, int) else None
        if len(shape) == 3:
            expected = (batch, query_length, key_length)
            fits = all(
                got is None or want is None or got == want or (axis == 0 and got == 1)
                for axis, (got, want) in enumerate(zip(shape, expected))
            )
            if not fits:
                raise ValueError(
                    "Dense `relations` must have shape `[batch or 1, query, key]` = "
                    f"{expected}. Received: relations.shape={shape}"
                )
        elif len(shape) != 2 or shape[1] != 4:
            raise ValueError(
                "`relations` must be dense relation ids `[batch, query, key]` (rank 3) "
                "or an edge list `[num_edges, 4]` of (batch, query, key, relation). "
                f"Received: relations.shape={shape}"
            )

    def get_config(self):
        config = super().get_config()
        initializer = initializer_config(self.relative_embeddings_initializer)
        config.update(
            {
                "num_relations": self.num_relations,
                "add_relative_to_keys": self.add_relative_to_keys,
                "add_relative_to_values": self.add_relative_to_values,
                "add_relative_bias": self.add_relative_bias,
                "heads_share_relative_embedding": self.heads_share_relative_embedding,
                "check_relations": self.check_relations,
                "relative_embeddings_initializer": initializer,
                "relative_bias_initializer": keras.initializers.serialize(
                    keras.initializers.get(self.relative_bias_initializer)
                ),
            }
        )
        return config
