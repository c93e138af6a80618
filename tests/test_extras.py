"""setup.py's extras install what their features import: each extra's code is
followed (statically, `tests/import_reach.py`) through everything it calls,
and every third-party module met must come from the extra's requirements or
from `install_requires`."""

import ast
import importlib.metadata
import re
from dataclasses import dataclass

import pytest

from tests.import_reach import BODY, ROOT, Reach, parse

# The import names that are not their distribution's name.
DISTRIBUTIONS = {
    "google": "protobuf",
    "grpc": "grpcio",
    "note_seq": "note-seq",
    "official": "tf-models-official",
    "PIL": "pillow",
    "pretty_midi": "pretty-midi",
    "skimage": "scikit-image",
    "sklearn": "scikit-learn",
    "tensorflow_datasets": "tensorflow-datasets",
    "tensorflow_serving": "tensorflow-serving-api",
    "tensorflow_text": "tensorflow-text",
    "yaml": "pyyaml",
}
# What a requirement brings with it that the code imports by name (the
# distributions' own requirements, checked below against their metadata).
BRINGS = {
    "tensorflow": {"numpy", "protobuf", "grpcio", "requests"},
    "keras": {"h5py"},
    "note-seq": {"pretty-midi", "mido", "numpy", "scipy"},
    "pretty-midi": {"mido"},
    "scikit-learn": {"scipy"},
}


@dataclass(frozen=True)
class Feature:
    """`code`: files, folders and `file:function` units the extra is for.
    `includes`: extras whose code this code runs: their requirements must be
    in this extra too. `optional`: extras whose code this code runs only on
    request (it names the extra to install). `modules`: modules the feature
    needs that no code of the repository imports."""

    code: tuple = ()
    includes: tuple = ()
    optional: tuple = ()
    modules: tuple = ()


# `file:function` units of the image metrics (scikit-image).
IMAGE_METRICS = tuple(
    f"keras_selfattn/models/metrics.py:{name}" for name in ("psnr", "ssim", "psnr_per_image", "ssim_per_image")
)
FEATURES = {
    "beam": Feature(("keras_selfattn/generation/beam.py",)),
    "music": Feature(("keras_selfattn/data/music",)),
    "text": Feature(("keras_selfattn/data/text", "keras_selfattn/models/metrics.py:translation_scores")),
    # `translate` runs beam search; `client.py music` reads MIDI (it asks for `.[music]`).
    "serving": Feature(("keras_selfattn/export", "serving"), includes=("beam",), optional=("music", "torch")),
    # Every recipe runs as documented: data, plots, beam search, export.
    "recipes": Feature(
        ("recipes", "keras_selfattn/data/images", *IMAGE_METRICS),
        includes=("beam", "music", "text", "serving"),
        optional=("torch",),
    ),
    # `KERAS_BACKEND=jax`: Keras imports jax.
    "jax": Feature(modules=("jax",)),
    # `KERAS_BACKEND=torch`: Keras imports torch, and generation runs under its `no_grad`.
    "torch": Feature(("keras_selfattn/generation/execution.py:_torch_no_grad",)),
    # `model.export(format="onnx" / "litert")` and running the results (the tests import
    # them with `pytest.importorskip`, which the import reach does not follow).
    "export": Feature(modules=("onnx", "onnxruntime", "tf2onnx", "ai_edge_litert")),
    # `make test` runs every test on TensorFlow, and on JAX and PyTorch.
    "test": Feature(("tests",), includes=("recipes", "jax", "torch", "export")),
}
# The rest of the package needs only `install_requires`: `translate_tokens`
# with `beam_size` > 1 runs the beam extra's code, and generation on the torch
# backend the torch extra's. Every extra's code imports the package, so what
# the core runs on request, each extra's code may too.
CORE = Feature(("keras_selfattn",), optional=("beam", "torch"))


def _owners():
    """`{(path, name or "*"): extra}` for every extra's code."""
    owners = {}
    for extra, feature in FEATURES.items():
        for code in feature.code:
            relative, _, name = code.partition(":")
            path = ROOT / relative
            files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
            for file in files:
                assert file.is_file(), f"{extra}'s code {code} is not a file of the repository"
                owners[(file, name or "*")] = extra
    return owners


OWNERS = _owners()


def owner(path, name):
    return OWNERS.get((path, name), OWNERS.get((path, "*")))


def _included(extra):
    """`extra` and every extra it includes, through their own includes."""
    found, pending = set(), [extra]
    while pending:
        current = pending.pop()
        if current not in found:
            found.add(current)
            pending += list(FEATURES[current].includes) if current in FEATURES else []
    return found


def _reach(extra):
    """The `Reach` of `extra`'s code (`None`: the core), stopping at other
    extras' functions and classes."""
    allowed = _included(extra) | {None}
    reach = Reach(stop=lambda path, name: owner(path, name) not in allowed)
    if extra is None:
        for file in sorted((ROOT / "keras_selfattn").rglob("*.py")):
            if owner(file, BODY) is None:
                reach.unit(file, BODY)
            for name in [n for n in parse(file).definitions if owner(file, n) is None]:
                reach.unit(file, name)
        return reach
    for (path, name), code_owner in OWNERS.items():
        if code_owner == extra:
            reach.whole_module(path) if name == "*" else reach.unit(path, name)
    return reach


def _evaluate(node, names):
    if isinstance(node, ast.List):
        return [_evaluate(item, names) for item in node.elts]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _evaluate(node.left, names) + _evaluate(node.right, names)
    raise AssertionError(f"setup.py line {node.lineno}: not a list of requirement strings")


def setup_requirements(source):
    """`(install_requires, {extra: requirements})` read from setup.py's
    source: its module-level lists and its `setup(...)` call."""
    names, call = {}, None
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign) and isinstance(statement.value, (ast.List, ast.BinOp)):
            names[statement.targets[0].id] = _evaluate(statement.value, names)
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            call = {keyword.arg: keyword.value for keyword in statement.value.keywords}
    extras = call["extras_require"]
    return (
        _evaluate(call["install_requires"], names),
        {key.value: _evaluate(value, names) for key, value in zip(extras.keys, extras.values)},
    )


def distribution(requirement):
    """The normalized distribution name of a requirement string."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


def provided(requirements):
    """The distributions that `requirements` install, with what they bring."""
    found, pending = set(), [distribution(requirement) for requirement in requirements]
    while pending:
        current = pending.pop()
        if current not in found:
            found.add(current)
            pending += list(BRINGS.get(current, ()))
    return found


def missing(extra, install_requires, extras):
    """Problems with the requirements of `extra` (`None`: the core), as sentences."""
    name = f"extra {extra!r}" if extra else "install_requires"
    have = provided(install_requires + (extras[extra] if extra else []))
    reach = _reach(extra)
    return (
        _lacking_included(name, extra, extras, have)
        + _lacking_imports(name, FEATURES.get(extra, CORE), reach, have)
        + _unplanned_runs(name, FEATURES.get(extra, CORE), reach)
    )


def _lacking_included(name, extra, extras, have):
    return [
        f"{name} includes {included!r} but lacks its {requirement!r}"
        for included in sorted(_included(extra) - {extra, None})
        for requirement in extras[included]
        if distribution(requirement) not in have
    ]


def _lacking_imports(name, feature, reach, have):
    needs = {module: "the feature" for module in feature.modules}
    needs.update({module: _where(unit) for module, unit in reach.external.items()})
    problems = []
    for module, where in sorted(needs.items()):
        wanted = distribution(DISTRIBUTIONS.get(module, module))
        if wanted not in have:
            problems.append(f"{name} lacks {wanted!r}: {where} imports {module}")
    return problems


def _unplanned_runs(name, feature, reach):
    """Other extras' code that this code runs, neither included nor optional;
    optional extras it never runs."""
    on_request = set(feature.optional) | set(CORE.optional)
    problems = [
        f"{name}'s code runs the {owner(*unit)!r} extra's {_where(unit)} (from {_where(caller)}): "
        f"include {owner(*unit)!r} or mark it optional"
        for unit, caller in sorted(reach.stopped.items(), key=str)
        if owner(*unit) not in on_request
    ]
    for other in feature.optional:
        if not any(owner(*unit) == other for unit in reach.stopped):
            problems.append(f"{name} marks {other!r} optional but its code never runs that extra's code")
    return problems


def _where(unit):
    path, name = unit
    return f"{path.relative_to(ROOT)}:{name or '<module>'}"


@pytest.fixture(scope="module")
def requirements():
    return setup_requirements((ROOT / "setup.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize("extra", [*FEATURES, None])
def test_each_extra_installs_what_its_code_imports(requirements, extra):
    install_requires, extras = requirements
    assert missing(extra, install_requires, extras) == []


def test_every_extra_is_checked_and_all_installs_every_extra(requirements):
    _, extras = requirements
    assert set(extras) == set(FEATURES) | {"all"}
    everything = {distribution(r) for extra in FEATURES for r in extras[extra]}
    assert {distribution(r) for r in extras["all"]} == everything


def test_the_check_finds_an_extra_without_what_its_code_imports(requirements):
    install_requires, extras = requirements
    serving = [r for r in extras["serving"] if distribution(r) != "tf-models-official"]
    problems = missing("serving", install_requires, {**extras, "serving": serving})
    assert "extra 'serving' includes 'beam' but lacks its 'tf-models-official==2.20.*'" in problems
    assert any(p.startswith("extra 'serving' lacks 'tf-models-official'") and "beam.py" in p for p in problems)


@pytest.mark.parametrize("brought_by, brought", sorted(BRINGS.items()))
def test_what_a_requirement_brings_is_in_its_metadata(brought_by, brought):
    try:
        requires = importlib.metadata.requires(brought_by) or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{brought_by} is not installed")
    assert brought <= provided(r for r in requires if "extra ==" not in r)


def test_the_torch_pin_is_documented_as_the_tested_version_with_the_cpu_index(requirements):
    """PyPI's Linux wheel of the pinned torch is the CUDA build: setup.py and
    the README must say how to get the CPU build, not that the pin avoids CUDA."""
    _, extras = requirements
    (pin,) = [r for r in extras["test"] if distribution(r) == "torch"]
    command = f"pip install {pin} --index-url https://download.pytorch.org/whl/cpu"
    for file in ("setup.py", "README.md"):
        text = " ".join((ROOT / file).read_text(encoding="utf-8").split())
        assert command in text, f"{file} does not name the CPU index for {pin}"
        assert not re.search(r"needs only CPU torch|avoids? the CUDA|(CPU|cpu) (build|wheel) of torch", text), file
