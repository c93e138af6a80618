"""Python source files to functions: the default corpus (the running
interpreter's standard library), a user's folder, a split by whole file and
the removal of duplicate functions (identical text within the data,
near-duplicates across the split)."""

import ast
import hashlib
import io
import keyword
import sysconfig
import tokenize
from pathlib import Path

_SKIPPED_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
_LITERALS = {tokenize.STRING: "<str>", tokenize.NUMBER: "<num>"}
# Python 3.12+ splits an f-string into several tokens; before, it is one STRING.
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def default_source_dir():
    """The running interpreter's standard-library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def find_python_files(source_dir):
    """Sorted `.py` files under `source_dir` (third-party `site-packages` and
    `dist-packages` folders left out).

    Raises:
        ValueError: `source_dir` is not a folder or holds no `.py` file.
    """
    root = Path(source_dir)
    if not root.is_dir():
        raise ValueError(f"`source_dir` must be a folder of .py files; {str(root)!r} is not a folder")
    files = sorted(
        path for path in root.rglob("*.py")
        if path.is_file() and not {"site-packages", "dist-packages"} & set(path.relative_to(root).parts)
    )
    if not files:
        raise ValueError(f"`source_dir` {str(root)!r} holds no .py file")
    return files


def read_functions(path):
    """The functions of one file as standalone sources (each `def` and its
    body, dedented; decorators left out), in file order; nested functions and
    methods included.

    Raises:
        ValueError: the file cannot be decoded or does not parse (the message
            says why).
    """
    try:
        with tokenize.open(path) as handle:
            source = handle.read()
        module = ast.parse(source, filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"{type(error).__name__}: {error}") from None
    lines = source.splitlines(keepends=True)
    functions = []
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            text = _standalone(lines, node)
            if text is not None:
                functions.append((node.lineno, text))
    return [text for _, text in sorted(functions)]


def _standalone(lines, node):
    """The function's lines without the `def`'s indentation, or None when
    they do not parse alone (a body line that shares its line with code
    outside the function, say)."""
    indent = lines[node.lineno - 1][: node.col_offset]
    if indent.strip():
        return None
    body = lines[node.lineno - 1 : node.end_lineno]
    text = "".join(line[len(indent):] if line.startswith(indent) else line for line in body)
    if not text.endswith("\n"):
        text += "\n"
    try:
        parsed = ast.parse(text)
    except SyntaxError:
        return None
    statements = parsed.body
    if len(statements) != 1 or not isinstance(statements[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    return text


def split_files(files, held_out_fraction, seed=0, root=None):
    """`(train, held_out)` lists of whole files: each file goes to the
    held-out part when a hash of its name (relative to `root` when given, so
    the split does not depend on where the folder lies) and `seed` falls
    below `held_out_fraction` (stable when files are added or removed); at
    least one file lands on each side when there are two or more.

    Raises:
        ValueError: `held_out_fraction` not in (0, 1).
    """
    if not 0 < held_out_fraction < 1:
        raise ValueError(f"`held_out_fraction` must be in (0, 1), got {held_out_fraction!r}")
    def name(path):
        return (Path(path).relative_to(root) if root is not None else Path(path)).as_posix()

    scores = {path: _unit_hash(f"{seed}:{name(path)}") for path in files}
    held_out = [path for path in files if scores[path] < held_out_fraction]
    train = [path for path in files if scores[path] >= held_out_fraction]
    if len(files) >= 2 and not held_out:
        held_out = [min(train, key=scores.get)]
        train.remove(held_out[0])
    if len(files) >= 2 and not train:
        train = [max(held_out, key=scores.get)]
        held_out.remove(train[0])
    return train, held_out


def split_validation_files(held_out_files, validation_files=None, seed=0, root=None):
    """`(validation, test)` lists of whole held-out files: the
    `validation_files` whose hash of their name (relative to `root`) and
    `seed` is lowest validate, the others are the test (default: half the
    held-out files, rounded down, so a single held-out file is the test).

    Raises:
        ValueError: `validation_files` leaves no test file.
    """
    count = len(held_out_files) // 2 if validation_files is None else validation_files
    if count >= len(held_out_files) and held_out_files:
        raise ValueError(
            f"`validation_files` {count} must leave test files: there are {len(held_out_files)} held-out files"
        )

    def score(path):
        name = (Path(path).relative_to(root) if root is not None else Path(path)).as_posix()
        return _unit_hash(f"{seed}:validation:{name}")

    chosen = set(sorted(held_out_files, key=score)[:count])
    return [p for p in held_out_files if p in chosen], [p for p in held_out_files if p not in chosen]


def collect_parts(files_by_part, log=print):
    """`collect_functions` for any parts, the first the training one:
    `({part: function sources}, report)`. An identical function is kept in
    the first part that holds it; a function of a later part with the
    `normalised_form` of a training function is dropped (counted as its
    part's `near_duplicates`)."""
    seen = set()
    parts, report = {}, {"skipped_files": []}
    for name, files in files_by_part.items():
        parts[name], duplicates = _read_part(files, seen, report["skipped_files"], log)
        report[name] = {"files": len(files), "functions": len(parts[name]), "duplicates": duplicates}
    first, *later = files_by_part
    train_forms = {normalised_form(text) for text in parts[first]}
    for name in later:
        kept = [text for text in parts[name] if normalised_form(text) not in train_forms]
        near_duplicates = len(parts[name]) - len(kept)
        log(
            f"removed {near_duplicates} of {len(parts[name])} {name} functions: each is a training "
            "function with its identifiers renamed and literals changed (same normalised form)"
        )
        parts[name] = kept
        report[name].update(functions=len(kept), near_duplicates=near_duplicates)
    return parts, report


def _unit_hash(text):
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], 16) / 16**12


def normalised_form(source):
    """The tokens of `source` with every identifier renamed in order of first
    appearance (`v0`, `v1`, ...) and every literal replaced (`<str>`,
    `<num>`; an f-string is one `<str>`); comments and blank lines dropped.

    Two functions with the same form are near-duplicates: one is the other
    with names (its own, its variables', attributes', builtins') renamed
    consistently and constants changed.

    >>> normalised_form("def f(a):\\n    return a + 1  # one\\n")[3:]
    ('v1', ')', ':', 'NEWLINE', 'INDENT', 'return', 'v1', '+', '<num>', 'NEWLINE', 'DEDENT')
    >>> normalised_form("def g(b):\\n    return b + 2\\n") == normalised_form("def f(a):\\n    return a + 1\\n")
    True
    """
    names, form, fstring_depth = {}, [], 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        kind = token.type
        if kind == _FSTRING_START:
            if not fstring_depth:
                form.append("<str>")
            fstring_depth += 1
        elif kind == _FSTRING_END:
            fstring_depth -= 1
        elif fstring_depth or kind in _SKIPPED_TOKENS:
            continue
        elif kind == tokenize.NAME and not keyword.iskeyword(token.string):
            form.append(names.setdefault(token.string, f"v{len(names)}"))
        elif kind in _LITERALS:
            form.append(_LITERALS[kind])
        elif kind in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            form.append(tokenize.tok_name[kind])
        else:
            form.append(token.string)
    return tuple(form)


def collect_functions(train_files, held_out_files, log=print):
    """Reads the functions of both parts, skipping files that do not parse.

    Identical function sources are kept once: the first in file order, and a
    held-out function identical to a training one is dropped. A held-out
    function with the `normalised_form` of a training function (the same
    code up to names and constants) is dropped too, so the held-out part
    tests more than recall of renamed training code.

    Returns:
        `(train_functions, held_out_functions, report)`: lists of source
        strings, and a dict with `files`, `skipped_files` (`[[path, reason]]`),
        `functions` and `duplicates` per part, and the held-out part's
        `near_duplicates`.
    """
    seen = set()
    parts, report = {}, {"skipped_files": []}
    for name, files in (("train", train_files), ("held_out", held_out_files)):
        parts[name], duplicates = _read_part(files, seen, report["skipped_files"], log)
        report[name] = {"files": len(files), "functions": len(parts[name]), "duplicates": duplicates}
    train_forms = {normalised_form(text) for text in parts["train"]}
    held_out = [text for text in parts["held_out"] if normalised_form(text) not in train_forms]
    near_duplicates = len(parts["held_out"]) - len(held_out)
    report["held_out"].update(functions=len(held_out), near_duplicates=near_duplicates)
    log(
        f"removed {near_duplicates} of {len(parts['held_out'])} held-out functions: each is a training "
        "function with its identifiers renamed and literals changed (same normalised form)"
    )
    return parts["train"], held_out, report


def _read_part(files, seen, skipped, log):
    """`(functions, duplicates)` of `files`: the function sources not in
    `seen` (which grows), and how many were; files that do not parse are
    appended to `skipped` as `[path, reason]`."""
    kept, duplicates = [], 0
    for path in files:
        try:
            functions = read_functions(path)
        except ValueError as error:
            skipped.append([str(path), str(error)])
            log(f"skipped {path}: it does not parse ({error})")
            continue
        for text in functions:
            if text in seen:
                duplicates += 1
                continue
            seen.add(text)
            kept.append(text)
    return kept, duplicates


__all__ = [
    "collect_functions",
    "collect_parts",
    "default_source_dir",
    "find_python_files",
    "normalised_form",
    "read_functions",
    "split_files",
    "split_validation_files",
]
