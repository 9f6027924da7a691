"""Reading gin files and bindings the way the scripts take them.

`--gin_file=base.gin` names a file in the project's gin/ folder (or any path);
`--gin_bindings='NUM_TRAIN_STEPS=1000'` overrides a macro or a configurable's parameter
after the files. A mistake (an unknown file, configurable or parameter, a syntax error)
is one UserInputError naming the file or binding.
"""

import os

import gin

from electra_tf.errors import UserInputError

GIN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gin")


def resolve(name: str) -> str:
    """A gin file's path: `name` as given if it exists, else `name` inside gin/."""
    if os.path.exists(name):
        return name
    inside = os.path.join(GIN_DIR, name)
    if os.path.exists(inside):
        return inside
    if os.path.exists(inside + ".gin"):
        return inside + ".gin"
    available = sorted(os.path.relpath(os.path.join(d, f), GIN_DIR)
                       for d, _, files in os.walk(GIN_DIR) for f in files if f.endswith(".gin"))
    raise UserInputError(f"--gin_file={name} not found, here or in {GIN_DIR}; choose one of "
                         f"{', '.join(available)}, or give a path")


def parse(files: list[str], bindings: list[str]) -> None:
    """Clear gin's config, then read `files` (resolved) and `bindings` in order. The
    configurables must be imported (registered) first."""
    gin.clear_config()
    paths = [os.path.abspath(resolve(f)) for f in files]
    # `include 'pretraining.gin'` in our files resolves against the working directory first
    # (gin logs an error for each miss before trying its search paths): read from gin/.
    cwd = os.getcwd()
    os.chdir(GIN_DIR)
    try:
        for path in paths:
            try:
                gin.parse_config_file(path)
            except (ValueError, SyntaxError, KeyError, IOError) as e:
                raise UserInputError(f"--gin_file={path}: {_first_line(e)}; fix the file or "
                                     "the name (see the files in gin/)") from None
    finally:
        os.chdir(cwd)
    for binding in bindings:
        try:
            gin.parse_config(binding)
        except (ValueError, SyntaxError, KeyError) as e:
            raise UserInputError(f"--gin_bindings={binding!r}: {_first_line(e)}; check the "
                                 "name against the gin files (e.g. gin/small.gin)") from None


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
