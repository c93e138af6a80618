"""Every recipe command in README.md, docs/, serving/README.md and the
recipes' own help texts parses with that recipe's parser, with current flags
only (no old spelling that prints a note or a `DeprecationWarning`)."""

import contextlib
import importlib
import io
import re
import shlex
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md", ROOT / "serving" / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "recipes").glob("*.py")),
]
COMMAND = re.compile(r"python (?:-m )?recipes[./](\w+)(?:\.py)?((?: +[^\s`|&;>]+)*)")


SHELL_VARIABLE = re.compile(r'^\s*([A-Za-z_]+)="([^"]*)"$', re.MULTILINE)
LOOP_VARIABLE = re.compile(r"^\s*for ([A-Za-z_]+) in (\S+)[^;\n]*; do$", re.MULTILINE)
INLINE_CODE = re.compile(r"(?<!`)`[^`]+`(?!`)")


def documented_commands(text):
    """`(recipe, argv)` of each recipe command in `text`: lines continued
    with a backslash, and inline code broken over lines, joined; the page's
    shell variables (`COMMON="..."`) expanded, a loop's variable to its first
    value. Commands with an elision (`...`) or asking for `--help` are left out."""
    text = INLINE_CODE.sub(lambda span: span.group(0).replace("\n", " "), text)
    joined = re.sub(r"\\\\?\n\s*", " ", text)
    for name, value in SHELL_VARIABLE.findall(joined) + LOOP_VARIABLE.findall(joined):
        joined = joined.replace(f"${{{name}}}", value).replace(f"${name}", value)
    commands = [(recipe, shlex.split(arguments)) for recipe, arguments in COMMAND.findall(joined)]
    return [(recipe, argv) for recipe, argv in commands if not {"...", "--help", "-h"} & set(argv)]


def _commands():
    found = []
    for page in PAGES:
        for recipe, argv in documented_commands(page.read_text(encoding="utf-8")):
            found.append(pytest.param(recipe, argv, id=f"{page.relative_to(ROOT)}: {recipe} {' '.join(argv)}"[:150]))
    return found


def test_commands_are_found_on_the_pages():
    recipes = {param.values[0] for param in _commands()}
    assert {"music", "translate", "image_generation", "super_resolution", "variable_misuse", "demo"} <= recipes
    assert documented_commands("x\n    python recipes/music.py --model_dir runs/a \\\n        --epochs 5\n") == [
        ("music", ["--model_dir", "runs/a", "--epochs", "5"])
    ]


@pytest.mark.parametrize("recipe, argv", _commands())
def test_each_documented_command_parses_with_current_flags(recipe, argv):
    parser = importlib.import_module(f"recipes.{recipe}").build_parser()
    errors = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(errors):
        warnings.simplefilter("always")
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"recipes/{recipe}.py does not parse {argv}: {errors.getvalue()}")
    deprecated = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert not deprecated and "is now called" not in errors.getvalue(), (deprecated, errors.getvalue())
