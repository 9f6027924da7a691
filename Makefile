# Two commands for a new user: `make demo` and `make test`. Both install into .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DIR ?= out/demo

.PHONY: install test demo clean

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

# The main job on the embedded default data. Steps that later issues add (pre-training,
# export, replaced-token detection) append here.
demo: $(STAMP)
	$(PY) scripts/build_pretraining_data.py --input='data/corpus/*.txt.gz' \
	  --vocab_file=data/vocab/bert_uncased.txt --output_dir=$(DEMO_DIR)/data \
	  --max_seq_length=128 --num_workers=1
	$(PY) scripts/inspect_pretraining_data.py --data='$(DEMO_DIR)/data/*.tfrecord*' \
	  --vocab_file=data/vocab/bert_uncased.txt --num_examples=2

clean:
	rm -rf $(DEMO_DIR)
