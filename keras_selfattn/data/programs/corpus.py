"""Python source files to functions: the default corpus (the running
interpreter's standard library), a user's folder, a split by whole file and
the removal of duplicate functions."""

import ast
import hashlib
import sysconfig
import tokenize
from pathlib import Path


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


def _unit_hash(text):
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], 16) / 16**12


def collect_functions(train_files, held_out_files, log=print):
    """Reads the functions of both parts, skipping files that do not parse.

    Identical function sources are kept once: the first in file order, and a
    held-out function identical to a training one is dropped, so no function
    is in both parts.

    Returns:
        `(train_functions, held_out_functions, report)`: lists of source
        strings, and a dict with `files`, `skipped_files` (`[[path, reason]]`),
        `functions` and `duplicates` per part.
    """
    seen = set()
    parts, report = {}, {"skipped_files": []}
    for name, files in (("train", train_files), ("held_out", held_out_files)):
        kept, duplicates = [], 0
        for path in files:
            try:
                functions = read_functions(path)
            except ValueError as error:
                report["skipped_files"].append([str(path), str(error)])
                log(f"skipped {path}: it does not parse ({error})")
                continue
            for text in functions:
                if text in seen:
                    duplicates += 1
                    continue
                seen.add(text)
                kept.append(text)
        parts[name] = kept
        report[name] = {"files": len(files), "functions": len(kept), "duplicates": duplicates}
    return parts["train"], parts["held_out"], report


__all__ = [
    "collect_functions",
    "default_source_dir",
    "find_python_files",
    "read_functions",
    "split_files",
]
