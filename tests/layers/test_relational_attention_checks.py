"""RelationalAttention's checks of relation ids and edge indices, in every
mode a layer runs in, and what an unchecked out-of-range value does."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.layers import RelationalAttention
from layer_testing import jit

# A batch of 2 graphs of 6 nodes, 3 relation types; other sizes all differ.
BATCH, NODES, NUM_RELATIONS, HEADS, KEY_DIM, WIDTH = 2, 6, 3, 4, 5, 7
# Every bad value sits on pair (batch 1, query 2, key 4).
BAD_PAIR = (1, 2, 4)


def numpy(x):
    return ops.convert_to_numpy(x)


def make(**options):
    return RelationalAttention(HEADS, KEY_DIM, num_relations=NUM_RELATIONS, add_relative_bias=True, **options)


def nodes():
    return np.random.default_rng(0).normal(size=(BATCH, NODES, WIDTH)).astype("float32")


def good_ids():
    ids = np.random.default_rng(1).integers(0, NUM_RELATIONS + 1, (BATCH, NODES, NODES)).astype("int32")
    ids[BAD_PAIR] = 0
    return ids


def good_edges():
    """The edges of `good_ids` and one more, of relation 1, on the bad pair."""
    batch, query, key = np.nonzero(good_ids())
    edges = np.stack([batch, query, key, good_ids()[batch, query, key]], axis=1)
    return np.concatenate([edges, [[*BAD_PAIR, 1]]]).astype("int32")


def bad_ids(value):
    ids = good_ids()
    ids[BAD_PAIR] = value
    return ids


def bad_edges(column, value):
    edges = good_edges()
    edges[-1, column] = value
    return edges


# name -> (bad relations, the same relations without the bad value, the error's words).
DENSE_WORDS = r"Every relation id in `relations` must lie in \[0, 3\]. Received: values from"
BAD_VALUES = {
    "dense_id_7": (bad_ids(7), good_ids(), DENSE_WORDS + " 0 to 7"),
    "dense_id_-1": (bad_ids(-1), good_ids(), DENSE_WORDS + " -1 to 3"),
    "edge_key_6": (bad_edges(2, 6), good_edges()[:-1], r"Every edge key index in `relations` must lie in \[0, 5\]"),
    "edge_key_-1": (bad_edges(2, -1), good_edges()[:-1], r"Every edge key index in `relations` must lie in \[0, 5\]"),
    "edge_relation_9": (bad_edges(3, 9), good_edges()[:-1], r"Every edge relation index in `relations` .* \[0, 3\]"),
    "edge_batch_5": (bad_edges(0, 5), good_edges()[:-1], r"Every edge batch index in `relations` must lie in \[0, 1\]"),
}
DENSE = [name for name in BAD_VALUES if name.startswith("dense")]
EDGES = [name for name in BAD_VALUES if name.startswith("edge")]


def built(**options):
    layer = make(**options)
    layer(nodes(), relations=good_ids())
    return layer


@pytest.mark.parametrize("name", BAD_VALUES)
def test_eagerly_a_bad_value_raises_a_value_error_naming_it(name):
    relations, _, words = BAD_VALUES[name]
    with pytest.raises(ValueError, match=words):
        built()(nodes(), relations=relations)


@pytest.mark.parametrize("names", [DENSE, EDGES], ids=["dense", "edges"])
def test_unchecked_a_bad_value_adds_no_term_eagerly_and_compiled(names):
    """`check_relations=False`: the value is ignored, never read as another
    pair's, eagerly and under XLA (TensorFlow) or `jax.jit`."""
    layer, x = built(check_relations=False), nodes()
    compiled = jit(lambda x, relations: layer(x, relations=relations))
    for name in names:
        relations, without, _ = BAD_VALUES[name]
        expected = numpy(layer(x, relations=without))
        with_pair = good_edges() if name in EDGES else bad_ids(1)
        assert not np.allclose(numpy(layer(x, relations=with_pair)), expected, atol=1e-4)
        np.testing.assert_allclose(numpy(layer(x, relations=relations)), expected, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(numpy(compiled(x, relations)), expected, atol=1e-5, err_msg=name)


@pytest.mark.backends("jax", reason="jax.jit")
def test_under_jax_jit_values_cannot_be_checked_and_a_bad_edge_adds_no_term():
    layer, x = built(), nodes()
    relations, without, _ = BAD_VALUES["edge_key_6"]
    compiled = jit(lambda x, relations: layer(x, relations=relations))
    np.testing.assert_allclose(numpy(compiled(x, relations)), numpy(layer(x, relations=without)), atol=1e-5)


@pytest.mark.backends("tensorflow", reason="tf.function graphs")
@pytest.mark.parametrize("name", BAD_VALUES)
def test_in_a_tf_function_a_bad_value_fails_the_run_naming_it(name):
    import tensorflow as tf

    relations, without, words = BAD_VALUES[name]
    layer, x = built(), nodes()
    spec = tf.TensorSpec((None,) * 3 if relations.ndim == 3 else (None, 4), "int32")
    traced = tf.function(
        lambda x, relations: layer(x, relations=relations),
        input_signature=[tf.TensorSpec((None, None, WIDTH), "float32"), spec],
    )
    np.testing.assert_allclose(numpy(traced(x, without)), numpy(layer(x, relations=without)), atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match=words):
        traced(x, relations)


def relations_model(layer, form):
    """A Functional model of `layer`: inputs `x` and `relations` (dense
    `[batch, nodes, nodes]` or an edge list `[edges, 4]`)."""
    x = keras.Input((NODES, WIDTH), name="x")
    shape = (NODES, NODES) if form == "dense" else (4,)
    relations = keras.Input(shape, dtype="int32", name="relations")
    model = keras.Model({"x": x, "relations": relations}, layer(x, relations=relations))
    model.compile(optimizer="sgd", loss="mse")
    return model


def one_batch(relations):
    """A dataset of one batch: an edge list is not cut into batches."""
    import tensorflow as tf

    inputs = {"x": nodes(), "relations": relations}
    return tf.data.Dataset.from_tensors((inputs, np.zeros((BATCH, NODES, WIDTH), "float32")))


@pytest.mark.backends("tensorflow", reason="fit and predict run a TensorFlow graph")
@pytest.mark.parametrize("form, names", [("dense", DENSE), ("edges", EDGES)])
def test_predict_and_fit_fail_on_a_bad_value_naming_it(form, names):
    import tensorflow as tf

    layer = built()
    model = relations_model(layer, form)
    _, without, _ = BAD_VALUES[names[0]]
    model.predict(one_batch(without), verbose=0)
    for name in names:
        relations, _, words = BAD_VALUES[name]
        with pytest.raises(tf.errors.InvalidArgumentError, match=words):
            model.predict(one_batch(relations), verbose=0)
    # `fit` runs the same layer code in its own graph: one bad value shows it checks.
    with pytest.raises(tf.errors.InvalidArgumentError, match=words):
        model.fit(one_batch(relations), shuffle=False, verbose=0)


@pytest.mark.backends("tensorflow", reason="XLA drops TensorFlow's assertions")
def test_on_tensorflow_a_checking_layer_is_never_compiled_with_xla():
    import tensorflow as tf
    from keras.src.trainers.trainer import model_supports_jit

    relations, without, words = BAD_VALUES["dense_id_7"]
    checking, unchecked = (relations_model(built(check_relations=check), "dense") for check in (True, False))
    assert not checking.layers[-1].supports_jit and not model_supports_jit(checking)
    assert model_supports_jit(unchecked)  # what `jit_compile="auto"` asks on an accelerator
    with pytest.warns(UserWarning, match="jit_compile"):
        checking.compile(jit_compile=True)
    assert checking.jit_compile is False
    with pytest.raises(tf.errors.InvalidArgumentError, match=words):
        checking.predict(one_batch(relations), verbose=0)
    layer = checking.layers[-1]
    with pytest.raises(ValueError, match="`relations` cannot be checked .* XLA.*`check_relations=False`"):
        jit(lambda x, relations: layer(x, relations=relations))(nodes(), without)


def test_check_relations_is_in_the_config_and_must_be_a_bool():
    layer = make(check_relations=False)
    assert layer.get_config()["check_relations"] is False
    assert RelationalAttention.from_config(layer.get_config()).check_relations is False
    with pytest.raises(ValueError, match="`check_relations` must be True or False"):
        make(check_relations="no")
