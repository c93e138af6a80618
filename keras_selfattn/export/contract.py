"""What TensorFlow Serving can run, checked on a SavedModel's own graph.

The standard server runs core TensorFlow kernels and every tensorflow-text
op, with XLA off and no Python. So every op reachable from a signature
(through nested functions, loops and conditionals) must be registered by
TensorFlow or tensorflow-text, none may be a Python function or an XLA-only
op, no function may be marked for XLA compilation, every signature input
must have a free leading batch dimension, and every output must be a dense
tensor.
"""

import os

PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
FUNCTION_ATTRIBUTES = ("f", "then_branch", "else_branch", "cond", "body", "branches")
XLA_COMPILE_ATTRIBUTE = "_XlaMustCompile"


class ServingContractError(ValueError):
    """A SavedModel that TensorFlow Serving could not run as exported."""


def check_serving_contract(path, tags=("serve",)):
    """Raises `ServingContractError` listing every problem of the SavedModel at `path`.

    Args:
        path: a SavedModel directory.
        tags: the MetaGraph's tags; the server loads `serve`.

    Returns:
        `{signature name: sorted op types it runs}` when there is no problem.
    """
    meta_graph = _meta_graph(path, tags)
    functions = {function.signature.name: function for function in meta_graph.graph_def.library.function}
    is_registered = _registered_ops()
    problems, ops_by_signature = [], {}
    for name, signature in sorted(meta_graph.signature_def.items()):
        if name.startswith("__"):  # the saver's own entries, not a serving signature
            continue
        problems += _signature_io_problems(name, signature)
        nodes, marked = _reachable_nodes(meta_graph.graph_def, functions, signature)
        op_types = sorted({node.op for node in nodes} - set(functions))
        ops_by_signature[name] = op_types
        problems += [f"{name}: runs a Python function ({op})" for op in op_types if op in PYTHON_OPS]
        problems += [f"{name}: runs an XLA-only op ({op})" for op in op_types if op.startswith("Xla")]
        problems += [
            f"{name}: runs {op}, registered by neither TensorFlow nor tensorflow-text"
            for op in op_types
            if not is_registered(op) and op not in PYTHON_OPS and not op.startswith("Xla")
        ]
        problems += [f"{name}: {where} is marked {XLA_COMPILE_ATTRIBUTE}" for where in marked]
    if problems:
        raise ServingContractError(
            f"The SavedModel at {path} breaks TF Serving's contract:\n- " + "\n- ".join(problems)
        )
    return ops_by_signature


def signature_inputs(path, tags=("serve",)):
    """`{signature name: its input names, sorted}` of the SavedModel at
    `path`, read from its signature definitions (nothing is loaded)."""
    meta_graph = _meta_graph(path, tags)
    return {
        name: sorted(signature.inputs)
        for name, signature in sorted(meta_graph.signature_def.items())
        if not name.startswith("__")
    }


def _meta_graph(path, tags):
    from tensorflow.core.protobuf import saved_model_pb2

    with open(os.path.join(path, "saved_model.pb"), "rb") as file:
        saved_model = saved_model_pb2.SavedModel.FromString(file.read())
    for meta_graph in saved_model.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == set(tags):
            return meta_graph
    raise ServingContractError(f"The SavedModel at {path} has no MetaGraph tagged {list(tags)}")


def _signature_io_problems(name, signature):
    problems = []
    for key, info in sorted(signature.inputs.items()):
        dims = [dim.size for dim in info.tensor_shape.dim]
        if info.tensor_shape.unknown_rank or not dims or dims[0] != -1:
            problems.append(
                f"{name}: input {key!r} needs a free leading batch dimension (REST `instances` "
                f"requests batch every input); its shape is {dims}"
            )
    for key, info in sorted(signature.outputs.items()):
        if info.WhichOneof("encoding") != "name":
            problems.append(f"{name}: output {key!r} is not a dense tensor ({info.WhichOneof('encoding')})")
    return problems


def _reachable_nodes(graph_def, functions, signature):
    """Every NodeDef the signature's outputs depend on, following function
    calls, and where a function or call is marked for XLA compilation."""
    nodes_by_scope = {"": {node.name: node for node in graph_def.node}}
    nodes_by_scope.update(
        (name, {node.name: node for node in function.node_def}) for name, function in functions.items()
    )
    pending = [("", info.name.split(":")[0]) for info in signature.outputs.values()]
    seen, nodes, marked, visited_functions = set(), [], [], set()
    while pending:
        scope, node_name = pending.pop()
        if (scope, node_name) in seen:
            continue
        seen.add((scope, node_name))
        node = nodes_by_scope[scope].get(node_name)
        if node is None:  # a function argument
            continue
        nodes.append(node)
        if _marked(node.attr):
            marked.append(f"node {node.name!r}" + (f" in {scope}" if scope else ""))
        for called in _called_functions(node, functions):
            if called in visited_functions:
                continue
            visited_functions.add(called)
            if _marked(functions[called].attr):
                marked.append(f"function {called!r}")
            pending += [(called, child.name) for child in functions[called].node_def]
        pending += [(scope, _producer(input_name)) for input_name in node.input]
    return nodes, marked


def _producer(input_name):
    return input_name.lstrip("^").split(":")[0]


def _called_functions(node, functions):
    called = [node.op] if node.op in functions else []
    for attribute in FUNCTION_ATTRIBUTES:
        if attribute not in node.attr:
            continue
        value = node.attr[attribute]
        called += [value.func.name] if value.HasField("func") else [f.name for f in value.list.func]
    return [name for name in called if name in functions]


def _marked(attributes):
    return XLA_COMPILE_ATTRIBUTE in attributes and attributes[XLA_COMPILE_ATTRIBUTE].b


def _registered_ops():
    """`is_registered(op type)`: TensorFlow's registry with tensorflow-text's ops loaded."""
    from tensorflow.python.framework import op_def_registry

    import tensorflow_text  # noqa: F401  (registers its ops)

    return lambda op: op_def_registry.get(op) is not None
