"""A recipe's command line: the error it reports as a usage error, running
its `main`, and running another recipe as a program of its own."""

import shlex
import subprocess
import sys
from pathlib import Path


class UsageError(ValueError):
    """A flag or setting the recipe cannot run with; `run_cli` prints its
    message as a command-line error instead of a traceback."""


def run_cli(main, argv=None):
    """Runs `main(argv)`; a `UsageError` becomes `prog: error: message`, exit 2."""
    try:
        return main(argv)
    except UsageError as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def run_recipe(recipe, argv):
    """Runs the recipe `recipe` (`python -m recipes.<recipe> argv`) in a
    process of its own, whose output goes where this one's goes.

    Raises:
        UsageError: it stopped on a usage error (exit status 2).
        RuntimeError: it failed otherwise.
    """
    command = [sys.executable, "-m", f"recipes.{recipe}", *argv]
    sys.stdout.flush()
    status = subprocess.run(command, check=False).returncode
    if status == 2:
        raise UsageError(f"recipes/{recipe}.py stopped on a usage error (above): {shlex.join(command)}")
    if status:
        raise RuntimeError(f"recipes/{recipe}.py failed with exit status {status}: {shlex.join(command)}")
