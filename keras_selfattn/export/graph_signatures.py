"""The graph models' `serving_default`: node tokens and relations in, node
encodings (or the heads' named outputs) and a per-row `status` out."""

import tensorflow as tf

from keras_selfattn.export import request_checks


def graph_endpoint(model, encoder, output_name):
    """`serving_default(token_ids int32 [B, N], relations int32 [B, N, N])`
    -> `{output_name: float32 encodings, "status": string [B]}`, or with
    `output_name=None` the model's own dict of named outputs (heads over a
    `GraphTransformer`) and `status`.

    `encoder` is the `GraphTransformer` that `model` is or holds: its
    vocabulary and relation count bound the ids. A row whose token ids lie
    outside `[0, vocabulary_size)` or whose relation ids lie outside `[0,
    num_relations]` gets its problem in `status` and zeros in every other
    output; the model runs it as an empty graph, so it fails no other row
    merged into its batch. `relations` whose node axes differ from
    `token_ids`' fail the request (InvalidArgument)."""
    vocabulary_size, num_relations = encoder.vocabulary_size, encoder.num_relations
    if output_name is None and "status" in model.output:
        raise ValueError(
            "The heads' outputs must not be named `status`: the exported `serving_default` "
            f"gives each row's status under that name. Received outputs: {sorted(model.output)}"
        )

    def serve(inputs):
        token_ids, relations = _checked_layout(inputs["token_ids"], inputs["relations"])
        status = request_checks.row_status([
            (
                tf.reduce_any(request_checks.outside(token_ids, 0, vocabulary_size - 1), axis=1),
                f"`token_ids` must be token ids in [0, {vocabulary_size})",
            ),
            (
                tf.reduce_any(request_checks.outside(relations, 0, num_relations), axis=[1, 2]),
                f"`relations` must be relation ids in [0, {num_relations}] (0: no relation)",
            ),
        ])
        good = tf.equal(status, "")
        graph = {
            "token_ids": request_checks.good_or(good, token_ids, 0),
            "relations": request_checks.good_or(good, relations, 0),
        }
        outputs = model(graph, training=False)
        if output_name is not None:
            outputs = {output_name: outputs}
        answered = {
            name: request_checks.good_or(good, tf.cast(value, "float32"), 0.0) for name, value in outputs.items()
        }
        return dict(answered, status=status)

    signature = {
        "token_ids": tf.TensorSpec([None, None], tf.int32, name="token_ids"),
        "relations": tf.TensorSpec([None, None, None], tf.int32, name="relations"),
    }
    return "serving_default", serve, [signature]


def _checked_layout(token_ids, relations):
    """The inputs, once they share a batch size and `relations` is `[B, N, N]`
    over the `N` nodes of `token_ids`."""
    _, checks = request_checks.batch_size_of({"token_ids": token_ids, "relations": relations})
    nodes = tf.shape(token_ids)[1]
    checks.append(request_checks.check(
        tf.reduce_all(tf.equal(tf.shape(relations)[1:], nodes)),
        "`relations` must be [batch, nodes, nodes] over the nodes of `token_ids`",
    ))
    return request_checks.after(checks, token_ids), request_checks.after(checks, relations)
