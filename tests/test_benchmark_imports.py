"""The benchmark modules that tests import change nothing at import: no environment variable
(an inherited TF_CPP_MIN_LOG_LEVEL would reach every later subprocess of the test run,
letting TensorFlow's start-up lines through the one-line errors) and no absl flag (flags
defined at import clash between benchmarks), but zh_pos_study's, a script whose flags its
test parses. Each module is imported in a fresh process: in the test process an earlier
test file's import (of it, or of `common` it imports) would leave nothing to see."""

import json
import os
import re
import subprocess
import sys

from conftest import ROOT

MODULES = ("common", "corpora", "console_curves", "dropout_cost", "grid", "compare",
           "zh_pos_study")
DEFINES_FLAGS = {"zh_pos_study"}

PROBE = """
import importlib, json, os, sys
import tensorflow  # the test process has it: its own import is not the module's doing
from absl import flags
sys.path[:0] = ["benchmarks", os.path.join("benchmarks", "study")]
report = {}
for name in sys.argv[1:]:
    environment, names = dict(os.environ), set(flags.FLAGS)
    importlib.import_module(name)
    report[name] = {
        "environment": sorted(k for k in set(environment) | set(os.environ)
                              if environment.get(k) != os.environ.get(k)),
        "flags": sorted(set(flags.FLAGS) - names)}
print(json.dumps(report))
"""


def test_every_benchmark_module_the_tests_import_is_checked():
    imported = set()
    for name in os.listdir(os.path.join(ROOT, "tests")):
        if name.endswith(".py"):
            with open(os.path.join(ROOT, "tests", name), encoding="utf-8") as f:
                imported |= set(re.findall(r"^import (\w+)  # noqa: E402", f.read(), re.M))
    assert imported and imported <= set(MODULES), sorted(imported - set(MODULES))


def test_importing_a_benchmark_module_leaves_the_environment_and_the_flags_alone():
    done = subprocess.run([sys.executable, "-c", PROBE, *MODULES], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for name in MODULES:
        assert report[name]["environment"] == [], name
        if name not in DEFINES_FLAGS:
            assert report[name]["flags"] == [], name
    # The probe does see flags defined at import.
    assert "results_name" in report["zh_pos_study"]["flags"]
