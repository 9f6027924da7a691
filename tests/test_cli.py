"""What every script shares (electra_tf.cli): its --help usage."""

import ast
import glob
import os

from conftest import ROOT


def test_every_script_usage_keeps_its_shell_line_breaks():
    """A usage example continued with ` \\` in a plain docstring reaches --help as one line
    with a run of spaces (Python reads backslash-newline as nothing); raw docstrings keep it."""
    scripts = sorted(glob.glob(os.path.join(ROOT, "scripts", "*.py")))
    assert len(scripts) >= 8
    for path in scripts:
        source = open(path, encoding="utf-8").read()
        docstring = ast.get_docstring(ast.parse(source), clean=False)
        assert docstring, path
        written = source.split('"""')[1]  # the docstring as written in the file
        assert written.count(" \\\n") == docstring.count(" \\\n"), path
