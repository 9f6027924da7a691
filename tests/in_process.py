"""A script run in the test's own process, as `python scripts/NAME ARGS` would run it.

A script started in a new interpreter pays TensorFlow's start-up (5 s on a fast core, 12 s
on a slow one) before it reads a flag. A test of what a script prints, returns and writes
(its refusals, a small build) sees the same here, where the script's code runs through the
same `cli.run` and absl's `app.run` as in its own process: flags parsed from its argv, a
UserInputError printed as one `error:` line with exit code 1, absl's flag errors. What only
a process of its own shows stays with the tests that start one: nothing on stderr but the
error line (TensorFlow's C++ logging writes to file descriptor 2, which is not captured
here), a refusal made before TensorFlow is imported, signals, `kill -9`, XLA's first log
lines and its fatal line for a bad XLA_FLAGS.
"""

import contextlib
import gc
import io
import logging
import os
import runpy
import subprocess
import sys

from absl import app, flags
from absl import logging as absl_logging

from conftest import ROOT


def run_script(script: str, *args: str, env: dict | None = None,
               cwd: str | None = None) -> subprocess.CompletedProcess:
    """Runs scripts/`script` with `args` here; returns what `subprocess.run(...,
    capture_output=True, text=True)` of it would: returncode, stdout, stderr.

    `env` adds to the environment and `cwd` is the working directory during the run; both,
    the flags the script defines, sys.argv, sys.path and the logging levels it sets are put
    back after it. An exception the script does not turn into an exit code (a traceback, in
    its own process) is raised here.
    """
    from electra_tf import cli
    from electra_tf.training import xla_scratch

    path = os.path.join(ROOT, "scripts", script)
    app.define_help_flags()  # (app.run defines them once a process: they are not the script's)
    defined = _flag_state()
    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_levels = absl_logging.get_verbosity(), logging.getLogger("tensorflow").level
    saved_cli = cli._absorb_first_xla_log, xla_scratch.stage
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        for name in list(flags.FLAGS):  # a benchmark's flags, from a module a test imported
            if not flags.FLAGS.find_module_defining_flag(name, "").startswith("absl."):
                delattr(flags.FLAGS, name)
        sys.argv = [path, *args]
        os.environ.update(env or {})
        if cwd is not None:
            os.chdir(cwd)
        # What a new process does once before its first compilation: this one has compiled
        # (and the XLA cache's flag is read when TensorFlow starts, here long ago).
        cli._absorb_first_xla_log = lambda: None
        xla_scratch.stage = lambda: None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit as e:
                code = e.code
    finally:
        cli._absorb_first_xla_log, xla_scratch.stage = saved_cli
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv, sys.path[:] = saved_argv, saved_path
        flags.FLAGS.unparse_flags()
        vars(flags.FLAGS).clear()  # the script's flags gone, the others back
        vars(flags.FLAGS).update(defined)
        absl_logging.set_verbosity(saved_levels[0])
        logging.getLogger("tensorflow").setLevel(saved_levels[1])
        gc.unfreeze()  # cli.run freezes what it leaves, for a process about to exit
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, exit code 1
        err.write(f"{code}\n")
        code = 1
    return subprocess.CompletedProcess([sys.executable, path, *args], code, out.getvalue(),
                                       err.getvalue())


def _flag_state() -> dict:
    """A copy of absl's flag registry (FLAGS' attributes: dicts of flags, of the flags of
    each module, lists of them), to put back after a script has defined its own."""
    def copy(value):
        if isinstance(value, dict):
            return {k: copy(v) for k, v in value.items()}
        return list(value) if isinstance(value, list) else value
    return {name: copy(value) for name, value in vars(flags.FLAGS).items()}
