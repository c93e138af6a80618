import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.layers import MultiHeadAttention, RelationalAttention, RelativeMultiHeadAttention
from layer_testing import run_layer_test
from tests.references import backend_gradients

# Distinct sizes: no axis can pass for another.
BATCH, HEADS, KEY_DIM, LENGTH, WIDTH, KEY_LENGTH, NUM_RELATIONS = 2, 3, 5, 7, 11, 13, 4
TABLES = ("relative_key_embeddings", "relative_value_embeddings", "relative_bias")


def numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def sequence(length=LENGTH, seed=0, batch=BATCH):
    return np.random.default_rng(seed).normal(size=(batch, length, WIDTH)).astype("float32")


def random_relations(key_length=LENGTH, seed=1, batch=BATCH):
    """Dense ids, about half the pairs without a relation."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, NUM_RELATIONS + 1, size=(batch, LENGTH, key_length))
    return np.where(rng.random(ids.shape) < 0.5, ids, 0).astype("int32")


def edges_of(ids):
    """The edge list of dense ids, pairs without a relation left out."""
    batch, query, key = np.nonzero(ids)
    return np.stack([batch, query, key, ids[batch, query, key]], axis=1).astype("int32")


def random_edges(key_length=LENGTH, count=40, seed=2):
    """Edges with repeated pairs (their terms add) and zero padding edges."""
    rng = np.random.default_rng(seed)
    edges = np.stack(
        [
            rng.integers(0, BATCH, count),
            rng.integers(0, LENGTH, count),
            rng.integers(0, key_length, count),
            rng.integers(1, NUM_RELATIONS + 1, count),
        ],
        axis=1,
    )
    edges = np.concatenate([edges, edges[:5], np.zeros((3, 4), int)])
    return edges.astype("int32")


def relation_counts(relations, key_length, batch=BATCH):
    """`[batch, query, key, num_relations + 1]` edges of each relation per
    pair, id 0 counting nothing: the relations as the naive form reads them."""
    counts = np.zeros((batch, LENGTH, key_length, NUM_RELATIONS + 1))
    if relations.ndim == 3:
        ids = np.broadcast_to(relations, (batch, LENGTH, key_length))
        b, i, j = np.indices(ids.shape)
        np.add.at(counts, (b, i, j, ids), 1.0)
    else:
        np.add.at(counts, tuple(relations.T), 1.0)
    counts[..., 0] = 0.0
    return counts


def weights_of(layer):
    """The projections and relation tables as float64 numpy; missing
    tables are zeros, tables get a zero row 0 and a head axis."""
    w = {}
    for name in ("query_dense", "key_dense", "value_dense", "output_dense"):
        dense = getattr(layer, name)
        w[name] = tuple(ops.convert_to_numpy(t).astype("float64") for t in (dense.kernel, dense.bias))
    for name, depth in zip(TABLES[:2], (layer.key_dim, layer.value_dim)):
        table = getattr(layer, name)
        table = np.zeros((NUM_RELATIONS, depth)) if table is None else ops.convert_to_numpy(table)
        table = np.broadcast_to(table, (HEADS, NUM_RELATIONS, depth)).astype("float64")
        w[name] = np.pad(table, [[0, 0], [1, 0], [0, 0]])
    bias = layer.relative_bias
    bias = np.zeros((HEADS, NUM_RELATIONS)) if bias is None else ops.convert_to_numpy(bias)
    w["relative_bias"] = np.pad(bias.astype("float64"), [[0, 0], [1, 0]])
    return w


def naive_relational_attention(w, query, memory, counts, mask):
    """Relational attention with the `[batch, heads, query, key, depth]`
    relation tensors materialised; `mask [batch, query, key]`."""
    q = np.einsum("bli,ihd->blhd", query, w["query_dense"][0]) + w["query_dense"][1]
    k = np.einsum("bli,ihd->blhd", memory, w["key_dense"][0]) + w["key_dense"][1]
    v = np.einsum("bli,ihd->blhd", memory, w["value_dense"][0]) + w["value_dense"][1]
    key_relations = np.einsum("bijr,hrd->bhijd", counts, w["relative_key_embeddings"])
    value_relations = np.einsum("bijr,hrd->bhijd", counts, w["relative_value_embeddings"])
    logits = np.einsum("bihd,bjhd->bhij", q, k) + np.einsum("bihd,bhijd->bhij", q, key_relations)
    logits = logits / np.sqrt(q.shape[-1]) + np.einsum("bijr,hr->bhij", counts, w["relative_bias"])
    mask = np.broadcast_to(mask[:, None], logits.shape)
    logits = np.where(mask, logits, -np.inf)
    peak = np.max(logits, -1, keepdims=True)
    exps = np.exp(logits - np.where(np.isfinite(peak), peak, 0.0))
    total = exps.sum(-1, keepdims=True)
    p = np.divide(exps, total, out=np.zeros_like(exps), where=total > 0)
    z = np.einsum("bhij,bjhd->bihd", p, v) + np.einsum("bhij,bhijd->bihd", p, value_relations)
    return np.einsum("blhd,hdo->blo", z, w["output_dense"][0]) + w["output_dense"][1]


def make(**kwargs):
    kwargs.setdefault("num_relations", NUM_RELATIONS)
    return RelationalAttention(HEADS, KEY_DIM, **kwargs)


# Present positions: row 0 padded on the left, row 1 on the right.
PRESENT = np.ones((BATCH, LENGTH), bool)
PRESENT[0, :2] = False
PRESENT[1, -1:] = False

OPTIONS = {
    "keys_values": dict(),
    "keys_bias_per_head": dict(add_relative_to_values=False, add_relative_bias=True,
                               heads_share_relative_embedding=False),
    "values_only_per_head": dict(add_relative_to_keys=False, heads_share_relative_embedding=False),
    "all": dict(add_relative_bias=True),
}


def naive_mask(masked):
    """The mask the naive form applies: padding (queries and keys) and causal."""
    if not masked:
        return np.ones((BATCH, LENGTH, LENGTH), bool)
    return PRESENT[:, :, None] & PRESENT[:, None, :] & np.tril(np.ones((LENGTH, LENGTH), bool))


def randomise_bias(layer):
    if layer.relative_bias is not None:
        layer.relative_bias.assign(np.random.default_rng(3).normal(size=(HEADS, NUM_RELATIONS)))


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("form", ["dense", "sparse_repeated_pairs"])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "padded_causal"])
def test_matches_naive_relations(options, form, masked):
    layer = make(**options)
    x = sequence()
    relations = random_relations() if form == "dense" else random_edges()
    layer(x, relations=relations)
    randomise_bias(layer)
    call = dict(query_mask=PRESENT, use_causal_mask=True) if masked else {}
    output = numpy(layer(x, relations=relations, **call))
    expected = naive_relational_attention(
        weights_of(layer), x, x, relation_counts(relations, LENGTH), naive_mask(masked)
    )
    rows = PRESENT if masked else np.ones_like(PRESENT)
    np.testing.assert_allclose(output[rows], expected[rows], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_cross_attention_to_a_longer_memory_matches_naive(form):
    layer = make(add_relative_bias=True, heads_share_relative_embedding=False)
    x, memory = sequence(), sequence(KEY_LENGTH, seed=4)
    relations = random_relations(KEY_LENGTH)
    relations = relations if form == "dense" else edges_of(relations)
    layer(x, memory, relations=relations)
    randomise_bias(layer)
    output, scores = layer(x, memory, relations=relations, return_attention_scores=True)
    assert tuple(scores.shape) == (BATCH, HEADS, LENGTH, KEY_LENGTH)
    expected = naive_relational_attention(
        weights_of(layer), x, memory, relation_counts(relations, KEY_LENGTH),
        np.ones((BATCH, LENGTH, KEY_LENGTH), bool),
    )
    np.testing.assert_allclose(numpy(output), expected, atol=1e-5, rtol=1e-5)


def test_dense_and_sparse_forms_agree_with_padding_edges():
    layer = make(add_relative_bias=True)
    x, ids = sequence(), random_relations()
    dense = numpy(layer(x, relations=ids, use_causal_mask=True))
    edges = np.concatenate([edges_of(ids), np.zeros((4, 4), "int32")])[::-1]
    sparse = numpy(layer(x, relations=edges, use_causal_mask=True))
    np.testing.assert_allclose(sparse, dense, atol=1e-6)
    # Ids shared by the batch: `[1, query, key]`.
    shared = numpy(layer(x, relations=ids[:1]))
    np.testing.assert_allclose(shared[0], numpy(layer(x[:1], relations=ids[:1]))[0], atol=1e-6)
    np.testing.assert_allclose(shared[1], numpy(layer(x[1:], relations=ids[:1]))[0], atol=1e-6)


def naive_loss(w, x, counts, mask, target):
    return np.sum(naive_relational_attention(w, x, x, counts, mask) * target)


def finite_difference(function, array, epsilon=1e-6):
    gradient = np.zeros_like(array)
    for index in np.ndindex(array.shape):
        saved = array[index]
        array[index] = saved + epsilon
        up = function()
        array[index] = saved - epsilon
        down = function()
        array[index] = saved
        gradient[index] = (up - down) / (2 * epsilon)
    return gradient


@pytest.mark.parametrize("form", ["dense", "sparse_repeated_pairs"])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "padded_causal"])
def test_gradients_match_naive_relations(form, masked):
    layer = make(add_relative_bias=True, heads_share_relative_embedding=form == "dense")
    x = sequence()
    relations = random_relations() if form == "dense" else random_edges()
    layer(x, relations=relations)
    randomise_bias(layer)
    target = np.random.default_rng(5).normal(size=x.shape).astype("float32")
    target = target * PRESENT[..., None] if masked else target
    call = dict(query_mask=PRESENT, use_causal_mask=True) if masked else {}
    variables = layer.trainable_variables
    identities = [id(v) for v in variables]
    picked = [identities.index(id(getattr(layer, name))) for name in TABLES]
    values = [ops.convert_to_numpy(v) for v in variables]

    def loss(x, *tables):
        trainable = list(values)
        for position, table in zip(picked, tables):
            trainable[position] = table
        output, _ = layer.stateless_call(trainable, [], x, relations=relations, **call)
        return ops.sum(ops.multiply(output, ops.convert_to_tensor(target)))

    ours = backend_gradients(loss, [x] + [values[p] for p in picked])

    w, x64 = weights_of(layer), x.astype("float64")
    counts, mask = relation_counts(relations, LENGTH), naive_mask(masked)
    shared = layer.heads_share_relative_embedding
    expected = [finite_difference(lambda: naive_loss(w, x64, counts, mask, target), x64)]
    for name in TABLES:
        table = w[name]
        gradient = finite_difference(lambda: naive_loss(w, x64, counts, mask, target), table)
        gradient = gradient[..., 1:] if name == "relative_bias" else gradient[:, 1:]
        expected.append(gradient.sum(0) if shared and name != "relative_bias" else gradient)
    for got, want in zip(ours, expected):
        np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-3)


def shaw_ids(query_length, key_length, k):
    distance = np.arange(key_length)[None, :] - np.arange(query_length)[:, None]
    return (np.clip(distance, -k, k) + k + 1)[None].astype("int32")


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "per_head"])
@pytest.mark.parametrize("causal", [False, True], ids=["both_ways", "causal"])
@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_distance_relations_equal_shaw_relative_attention(shared, causal, form):
    """A sequence is a graph with clipped-distance edges: ids
    `clip(j - i, -k, k) + k + 1` and Shaw's tables give Shaw's layer."""
    k = 2
    shaw = RelativeMultiHeadAttention(
        HEADS, KEY_DIM, max_relative_position=k, relative_type="shaw",
        heads_share_relative_embedding=shared,
    )
    layer = make(num_relations=2 * k + 1, heads_share_relative_embedding=shared)
    x = sequence()
    ids = shaw_ids(LENGTH, LENGTH, k)
    relations = ids if form == "dense" else edges_of(np.repeat(ids, BATCH, axis=0))
    shaw(x)
    layer(x, relations=relations)
    layer.set_weights(shaw.get_weights())
    np.testing.assert_allclose(
        numpy(layer(x, relations=relations, query_mask=PRESENT, use_causal_mask=causal)),
        numpy(shaw(x, query_mask=PRESENT, use_causal_mask=causal)),
        atol=1e-6,
    )


def test_without_relations_it_is_multi_head_attention():
    layer, plain = make(add_relative_bias=True), MultiHeadAttention(HEADS, KEY_DIM)
    x = sequence()
    layer(x, relations=random_relations())
    plain(x)
    for name in ("query_dense", "key_dense", "value_dense", "output_dense"):
        getattr(plain, name).set_weights(getattr(layer, name).get_weights())
    np.testing.assert_allclose(numpy(layer(x)), numpy(plain(x)), atol=1e-6)
    assert not np.allclose(numpy(layer(x, relations=random_relations())), numpy(plain(x)), atol=1e-4)


# The call contract every attention layer keeps (tests/layers/test_attention_api.py), with relations.

@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_one_argument_is_self_attention(form):
    layer, x, ids = make(), sequence(), random_relations()
    relations = ids if form == "dense" else edges_of(ids)
    output = numpy(layer(x, relations=relations))
    np.testing.assert_allclose(output, numpy(layer(x, x, relations=relations)), atol=1e-6)
    np.testing.assert_allclose(output, numpy(layer(x, x, x, relations=relations)), atol=1e-6)


def test_causal_mask_hides_the_future_and_its_relations():
    layer, x, ids = make(add_relative_bias=True), sequence(), random_relations()
    causal = numpy(layer(x, relations=ids, use_causal_mask=True))
    later = x.copy()
    later[:, 3:] += 1.0
    later_ids = ids.copy()
    later_ids[:, :, 3:] = NUM_RELATIONS - later_ids[:, :, 3:]
    changed = numpy(layer(later, relations=later_ids, use_causal_mask=True))
    np.testing.assert_allclose(changed[:, :3], causal[:, :3], atol=1e-5)
    assert not np.allclose(numpy(layer(later, relations=later_ids))[:, :3], causal[:, :3], atol=1e-5)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_keras_padding_mask_hides_padded_positions(side, form):
    layer = make(add_relative_bias=True)
    embedding = keras.layers.Embedding(10, WIDTH, mask_zero=True)
    tokens = keras.Input((LENGTH,), dtype="int32", batch_size=BATCH)
    ids = random_relations()
    relations = ids if form == "dense" else edges_of(ids)
    relation_input = keras.Input(batch_shape=relations.shape, dtype="int32")
    model = keras.Model([tokens, relation_input], layer(embedding(tokens), relations=relation_input))
    real = np.ones((BATCH, LENGTH), bool)
    real[0, :3] = side != "left"
    real[0, -3:] = side != "right"
    token_ids = np.where(real, np.array([[3, 1, 4, 1, 5, 9, 2], [2, 7, 1, 8, 2, 8, 1]]), 0)
    before = numpy(model([token_ids, relations]))
    table = embedding.embeddings
    table.assign(ops.concatenate([ops.ones((1, WIDTH)) * 5.0, table[1:]], axis=0))
    np.testing.assert_allclose(numpy(model([token_ids, relations]))[real], before[real], atol=1e-5)
    # Row 0's real positions attend as if the padding were not there.
    kept = np.nonzero(real[0])[0]
    alone = numpy(layer(embedding(token_ids[:1, kept]), relations=ids[:1][:, kept][:, :, kept]))
    np.testing.assert_allclose(before[0, kept], alone[0], atol=1e-5)


def test_attention_mask_layouts_as_in_keras():
    layer, x, memory = make(), sequence(), sequence(KEY_LENGTH, seed=1)
    ids = random_relations(KEY_LENGTH)
    mask = np.random.default_rng(2).random((BATCH, LENGTH, KEY_LENGTH)) > 0.4

    def attend(attention_mask):
        return numpy(layer(x, memory, attention_mask=attention_mask, relations=ids))

    batch_major = attend(mask)
    np.testing.assert_allclose(batch_major, attend(mask[:, None]), atol=1e-6)
    np.testing.assert_allclose(batch_major, attend(np.repeat(mask[:, None], HEADS, 1)), atol=1e-6)
    assert not np.allclose(batch_major, attend(None), atol=1e-4)
    with pytest.raises(ValueError, match="`attention_mask` must broadcast to"):
        attend(mask[:, :, :-1])


@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_attention_scores_and_attention_bias(form):
    layer, x, ids = make(), sequence(), random_relations()
    relations = ids if form == "dense" else edges_of(ids)
    output, scores = layer(x, relations=relations, return_attention_scores=True)
    scores = numpy(scores)
    assert scores.shape == (BATCH, HEADS, LENGTH, LENGTH)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(numpy(output), numpy(layer(x, relations=relations)), atol=1e-6)
    bias = np.zeros((1, 1, LENGTH, LENGTH), "float32")
    bias[..., 0] = -1e9
    _, biased = layer(x, relations=relations, attention_bias=bias, return_attention_scores=True)
    np.testing.assert_array_equal(numpy(biased)[..., 0], 0.0)


def test_cached_loop_equals_causal_pass():
    layer, x, ids = make(add_relative_bias=True), sequence(), random_relations()
    expected = numpy(layer(x, relations=ids, use_causal_mask=True))
    cache = np.zeros((BATCH, 2, LENGTH, HEADS, KEY_DIM), "float32")
    for t in range(LENGTH):
        step, cache = layer(
            x[:, t : t + 1], cache=cache, cache_update_index=t, use_causal_mask=True,
            relations=ids[:, t : t + 1],
        )
        np.testing.assert_allclose(numpy(step)[:, 0], expected[:, t], atol=1e-5)


SHARED_CHECKS = {
    "keys_values_dropout": dict(dropout=0.1),
    "all_per_head": dict(add_relative_bias=True, heads_share_relative_embedding=False),
}


# A layer that checks its relations is never compiled with XLA on TensorFlow
# (test_relational_attention_checks.py): Keras warns and predicts without it.
@pytest.mark.filterwarnings("ignore:Model doesn't support `jit_compile=True`:UserWarning")
@pytest.mark.parametrize("settings", SHARED_CHECKS.values(), ids=SHARED_CHECKS.keys())
def test_shared_layer_checks(settings, tmp_path):
    run_layer_test(
        RelationalAttention,
        dict(num_heads=HEADS, key_dim=KEY_DIM, num_relations=NUM_RELATIONS, **settings),
        {"query": sequence(), "relations": random_relations()},
        tmp_path,
        call_kwargs={"use_causal_mask": True},
    )


@pytest.mark.backends("tensorflow", reason="unknown lengths are a TensorFlow graph feature")
@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_unknown_batch_and_lengths_in_a_graph(form):
    import tensorflow as tf

    layer, x, ids = make(add_relative_bias=True), sequence(), random_relations()
    relations = ids if form == "dense" else edges_of(ids)
    expected = numpy(layer(x, relations=relations))
    relation_spec = tf.TensorSpec((None,) * 3 if form == "dense" else (None, 4), "int32")
    traced = tf.function(
        lambda x, relations: layer(x, relations=relations),
        input_signature=[tf.TensorSpec((None, None, WIDTH), "float32"), relation_spec],
    )
    np.testing.assert_allclose(traced(x, relations).numpy(), expected, atol=1e-5)


def test_config_and_table_shapes():
    layer = make(
        add_relative_bias=True, heads_share_relative_embedding=False,
        relative_embeddings_initializer="zeros", relative_bias_initializer="ones", value_dim=2,
    )
    revived = RelationalAttention.from_config(layer.get_config())
    assert revived.get_config() == layer.get_config()
    revived(sequence(), relations=random_relations())
    assert tuple(revived.relative_key_embeddings.shape) == (HEADS, NUM_RELATIONS, KEY_DIM)
    assert tuple(revived.relative_value_embeddings.shape) == (HEADS, NUM_RELATIONS, 2)
    assert tuple(revived.relative_bias.shape) == (HEADS, NUM_RELATIONS)
    np.testing.assert_array_equal(numpy(revived.relative_bias), 1.0)
    np.testing.assert_array_equal(numpy(revived.relative_key_embeddings), 0.0)


def with_edge(column, value):
    edges = edges_of(random_relations())
    edges[3, column] = value
    return edges


BAD_RELATIONS = {
    "id_too_large": (random_relations() + NUM_RELATIONS, r"relation id in `relations` must lie in \[0, 4\]"),
    "negative_id": (-random_relations(), r"relation id in `relations` must lie in \[0, 4\]"),
    "edge_batch_past_the_batch": (with_edge(0, BATCH), r"edge batch index .* \[0, 1\]"),
    "edge_query_past_the_sequence": (with_edge(1, LENGTH), r"edge query index .* \[0, 6\]"),
    "edge_key_past_the_sequence": (with_edge(2, LENGTH + 1), r"edge key index .* \[0, 6\]"),
    "edge_relation_too_large": (with_edge(3, NUM_RELATIONS + 1), r"edge relation index .* \[0, 4\]"),
    "float_dtype": (random_relations().astype("float32"), "`relations` must have an integer dtype"),
    "rank_one": (np.zeros((LENGTH,), "int32"), r"relations.shape=\(7,\)"),
    "edges_of_three_columns": (np.zeros((5, 3), "int32"), r"`\[num_edges, 4\]`.*relations.shape=\(5, 3\)"),
    "wrong_key_length": (random_relations()[:, :, :-1], r"Dense `relations` must have shape"),
}


@pytest.mark.parametrize("relations, message", BAD_RELATIONS.values(), ids=BAD_RELATIONS.keys())
def test_bad_relations_are_refused_by_name(relations, message):
    layer = make()
    with pytest.raises(ValueError, match=message):
        layer(sequence(), relations=relations)


def test_bad_relations_are_refused_when_a_model_is_built():
    layer = make()
    x = keras.Input((LENGTH, WIDTH))
    with pytest.raises(ValueError, match="`relations` must have an integer dtype"):
        layer(x, relations=keras.Input((LENGTH, LENGTH), dtype="float32"))
    with pytest.raises(ValueError, match="Dense `relations` must have shape"):
        layer(x, relations=keras.Input((LENGTH, LENGTH + 1), dtype="int32"))


BAD_OPTIONS = {
    "num_relations": (dict(num_relations=0), "num_relations"),
    "nothing_learned": (
        dict(add_relative_to_keys=False, add_relative_to_values=False),
        "At least one of `add_relative_to_keys`",
    ),
    "flash_attention": (dict(flash_attention=True), "flash_attention"),
    "not_a_bool": (dict(add_relative_bias=1), "add_relative_bias"),
}


@pytest.mark.parametrize("options, message", BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_bad_options_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        make(**options)


def test_needs_sequence_inputs():
    layer = make()
    with pytest.raises(ValueError, match="attention_axes"):
        layer(np.zeros((1, 3, 3, WIDTH), "float32"))
