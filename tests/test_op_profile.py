"""benchmarks/op_profile.py: a tiny train step profiled in a subprocess, and what its tables
say: the step's matmuls, dropout and AdamW among the ops, and the ops' events adding up to
about the step (one inter-op thread)."""

import json
import os
import subprocess
import sys

from conftest import ROOT


def test_op_profile_names_the_steps_ops_and_adds_up_to_the_step(tmp_path):
    subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "op_profile.py"), "--size=tiny",
         "--batch_size=4", "--seq_length=32", "--max_predictions=5", "--profile_steps=2",
         "--top=400", f"--op_results_dir={tmp_path}", "--op_results_name=tiny"],
        check=True, cwd=ROOT, capture_output=True, text=True, timeout=600)
    record = json.loads((tmp_path / "tiny.json").read_text())
    by_type, sites = record["by_op_type"], record["top_sites"]
    assert any("MatMul" in op_type for op_type in by_type), by_type
    assert "StatelessRandomUniformFullIntV2" in by_type  # the dropout masks' random bits
    assert "Cumsum" in by_type  # the sample's running sums of probabilities
    # Layers and copies are summed into one site: one dropout site per kind, not per layer.
    assert not any("layer_1" in site for site in sites), list(sites)[:10]
    assert any(site.startswith("adam_w/") for site in sites), list(sites)[:10]
    seconds = record["seconds_per_step"]
    assert 0.5 * seconds["profiled"] < seconds["ops_total"] < 1.2 * seconds["profiled"], seconds
    assert abs(sum(by_type.values()) - seconds["ops_total"]) < 1e-9
    markdown = (tmp_path / "tiny.md").read_text()
    assert "By op type" in markdown and "costliest sites" in markdown
