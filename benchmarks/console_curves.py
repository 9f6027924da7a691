"""Pre-training curves from scripts/run_pretraining.py's console lines, for runs whose
TensorBoard runs did not come back (a lent GPU machine's call returns its console log first,
benchmarks/results/gpu_h100.md): the total, generator and discriminator losses and the
examples/s of each run against its step, as a PNG, with the losses at chosen steps as a table.

    .venv/bin/python benchmarks/console_curves.py --results_name=NAME \\
        --title="..." LABEL=LOG [LABEL=LOG ...]

Each LOG holds lines such as
`step 2100/24000 | loss 24.7587 (generator 6.5503, discriminator 0.3642) | 8151.8 examples/s | ...`
(a resumed run's log repeats steps: the last line of a step wins).
Results: benchmarks/results/NAME.{json,md,png}.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402

FLAGS = flags.FLAGS


def define_flags():
    """The command's flags, defined when it runs rather than at import: the tests import
    this module beside other benchmarks that define the same names."""
    flags.DEFINE_string("results_name", None, "benchmarks/results/<name>.{json,md,png}.")
    flags.DEFINE_string("title", "Pre-training curves from console logs", "The plot's title.")
    flags.DEFINE_list("at_steps", [], "Steps shown in the table (default: 10 evenly spaced).")
    flags.DEFINE_string("notes", "", "A paragraph after the table.")
    flags.mark_flag_as_required("results_name")


# (an MLM run's line has no discriminator loss)
LINE = re.compile(r"^step (\d+)/(\d+) \| loss (\S+) \(generator (\S+)(?:, discriminator (\S+))?\)"
                  r" \| (\S+) examples/s")
SHOWN = [("loss", "total loss"), ("generator", "generator (MLM) loss"),
         ("discriminator", "discriminator (RTD) loss"), ("examples_per_second", "examples/s")]


def parse(text: str, name: str = "log") -> dict:
    """{step: {loss, generator, discriminator, examples_per_second}} and the run's total
    steps from a console log; a log without step lines is an error naming it."""
    points, total = {}, None
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            step, total = int(match[1]), int(match[2])
            points[step] = dict(zip(("loss", "generator", "discriminator", "examples_per_second"),
                                    (None if v is None else float(v)
                                     for v in match.groups()[2:])))
    if not points:
        raise ValueError(f"{name}: no 'step N/T | loss ...' lines; pass the console log "
                         "of scripts/run_pretraining.py")
    return {"num_train_steps": total, "points": dict(sorted(points.items()))}


def value_at(points: dict, step: int, key: str) -> float | None:
    """The value logged at `step` (None where the run has no line there)."""
    return points[step][key] if step in points else None


def table_steps(runs: dict, at_steps: list[str]) -> list[int]:
    """The table's steps: `at_steps` (integers), or by default ten evenly spaced, each the
    last logged step (of any run) at or before its place, so that rows fall on the loops'
    steps."""
    if at_steps:
        try:
            return [int(s) for s in at_steps]
        except ValueError:
            raise SystemExit(f"--at_steps={','.join(at_steps)}: pass whole step numbers, e.g. "
                             "--at_steps=1000,2000") from None
    logged = sorted(set().union(*(run["points"] for run in runs.values())))
    last = logged[-1]
    picked = []
    for i in range(1, 11):
        before = [step for step in logged if step <= round(last * i / 10)]
        picked.append(before[-1] if before else logged[0])
    return sorted(set(picked))


def plot(runs: dict, path: str, title: str):
    lines = [(label, "-", None, {key: [(step, values[key]) for step, values in
                                       run["points"].items() if values[key] is not None]
                                 for key, _ in SHOWN})
             for label, run in runs.items()]
    common.plot_panels(SHOWN, lines, path, title, "step")


def main(argv):
    specs = argv[1:]
    if not specs or any("=" not in s for s in specs):
        raise SystemExit("console_curves.py: pass LABEL=LOG for each run, e.g. "
                         "'ELECTRA-Small=benchmarks/results/gpu_small_pretrain_electra_oi.log'")
    runs = {}
    for spec in specs:
        label, path = spec.split("=", 1)
        if not os.path.isfile(path):
            raise SystemExit(f"{path}: " + ("a folder, not a file" if os.path.isdir(path)
                                             else "no such file")
                             + "; pass the console log of a pre-training run")
        with open(path, encoding="utf-8", errors="replace") as f:
            try:
                runs[label] = parse(f.read(), path) | {"log": os.path.relpath(path, common.REPO)}
            except ValueError as e:
                raise SystemExit(str(e))
    steps = table_steps(runs, FLAGS.at_steps)
    rows = []
    for step in steps:
        row = [f"{step:,}"]
        for run in runs.values():
            values = [value_at(run["points"], step, k) for k in ("generator", "discriminator")]
            row.append(" / ".join("-" if v is None else f"{v:.3f}" for v in values))
        rows.append(row)
    png = os.path.join(common.RESULTS_DIR, f"{FLAGS.results_name}.png")
    plot(runs, png, FLAGS.title)
    record = {"title": FLAGS.title, "run": common.run_info(), "runs": runs,
              "plots": [os.path.basename(png)]}
    body = ("Generator / discriminator loss (each the mean over the loop that ends at the "
            "step) from the console logs:\n\n"
            + common.markdown_table(["step"] + list(runs), rows) + "\n\n"
            + "".join(f"- {label}: `{run['log']}` ({run['num_train_steps']:,} steps)\n"
                      for label, run in runs.items())
            + f"\nPlot: `{os.path.basename(png)}`.\n\n"
            + (FLAGS.notes.strip() + "\n" if FLAGS.notes.strip() else ""))
    json_path, md_path = common.write_results(FLAGS.results_name, record, body)
    print(body)
    print(f"wrote {json_path}, {md_path} and {png}")


if __name__ == "__main__":
    # Set here, not at import (it would reach every later subprocess of the importer):
    # common.run_info imports TensorFlow, whose start-up lines are of no use here.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    define_flags()
    common.run(main)
