#!/bin/bash
# The device side of benchmarks/results/gpu_small_transfer.md: pre-train ELECTRA-Small (or an
# ablation) on one GPU with bf16 + XLA for at most LIMIT_S seconds (SIGTERM then saves a
# checkpoint), and leave a weights-only copy of the run, with its TensorBoard run, in OUT_DIR.
#
#   GIN_EXTRA=ablations/mlm.gin XLA_EXTRA=--xla_gpu_autotune_level=0 \
#     bash benchmarks/gpu/pretrain_and_export.sh NAME LIMIT_S 'DATA_GLOB' OUT_DIR BINDING...
#
# SIZE_GIN: the size's gin file (default small.gin; tiny.gin for a rehearsal on a CPU);
# GIN_EXTRA: a second gin file after it; EXPORT_ALL=1: every checkpoint the run keeps
# (export_weights.py --all), not only the latest; XLA_EXTRA: appended to XLA_FLAGS (the runs
# recorded used --xla_gpu_autotune_level=0: half the compile time, 35% fewer examples/s).
# Rerunning the same command resumes the run (its log is appended to).
if [ $# -lt 4 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: bash benchmarks/gpu/pretrain_and_export.sh NAME LIMIT_S 'DATA_GLOB' OUT_DIR" \
       "[BINDING...] (see the comment at its top)" >&2
  exit 2
fi
name=$1; limit=$2; data=$3; out=$4; shift 4
bindings=()
for b in "$@"; do bindings+=(--gin_bindings="$b"); done
read -ra xla_flags <<< "${XLA_FLAGS:-} ${XLA_EXTRA:-}"  # words, not globbed
if [ ${#xla_flags[@]} -gt 0 ]; then export XLA_FLAGS="${xla_flags[*]}"
else unset XLA_FLAGS; fi  # XLA aborts on a blank XLA_FLAGS
export PYTHONUNBUFFERED=1
mkdir -p "$out"
start=$(date +%s)
timeout -s TERM "$limit" python3 scripts/run_pretraining.py --gin_file="${SIZE_GIN:-small.gin}" \
  ${GIN_EXTRA:+--gin_file=$GIN_EXTRA} --model_dir="/tmp/run_$name" --train_data="$data" \
  --vocab_file=data/vocab/bert_uncased.txt --seed=1 \
  --gin_bindings="pretraining.precision='mixed_bfloat16'" \
  --gin_bindings=pretraining.jit_compile=True "${bindings[@]}" 2>&1 \
  | grep -v -E "^[WIE]0000" | tee -a "$out/pretrain_$name.log"
echo "pretraining exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s" | tee -a "$out/pretrain_$name.log"
python3 benchmarks/gpu/export_weights.py "/tmp/run_$name" "$out/$name" data/vocab/bert_uncased.txt \
  ${EXPORT_ALL:+--all}
cp -r "/tmp/run_$name/train" "$out/$name/"
