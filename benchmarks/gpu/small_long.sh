#!/bin/bash
# The device side of the next lease for issue 7: ELECTRA-Small alone, three times the
# fourth lease's budget (24,000 steps of batch 128: 3.1e16 FLOPs; the paper's 10,000-step
# warmup), with a checkpoint every 8,000 steps (1.0e16 FLOPs, the budget of the pair in
# gpu_small_transfer_oi.md) for benchmarks/finetune_pretrained.py --along_runs. Otherwise the
# pair's settings: small.gin, bf16, XLA with cuBLAS GEMMs, official initialisation, the
# study's seq-128 TFRecords (shards 0-8). About 400 s on an H100 at 7,780 examples/s, plus
# the compile. One call of the device tool after the staging calls (make_tf_bundle.sh's
# pieces in /tmp/chunks, the TFRecords in /tmp/data128; 92 s for the fourth lease's 14),
# carrying .gpu/clast; a run cut by LIMIT_S (default 520 s, inside the call's 600) saves a
# checkpoint and the same call again resumes it. Results, in this call's $OUT: the console
# log and the latest checkpoint's weights with the TensorBoard run (/tmp/export/electra_3e16_last,
# at most 4 pieces of 15 MiB; join them as send_back.sh says). The weights of every
# checkpoint stay in /tmp/export/electra_3e16 (about 170 MB for three): send them back with
# `bash benchmarks/gpu/send_back.sh /tmp/export/electra_3e16 FIRST`, FIRST = 0, 4, 8, ...
# (one call each, as many as its first call's "N pieces in all" says), right after this one:
# the machine is given back 30 s after a call ends, reply and next call included, which the
# fifth lease's first send_back.sh call missed after this 520-s call (it lost all three
# checkpoints; hence the latest now comes back with the run). In all, with the staging,
# about 700 of the lease's 900 s.
#
# A rehearsal on a CPU (no bundle, tiny model, a few steps):
#   REHEARSAL=1 SIZE_GIN=tiny.gin STEPS=6 EVERY=2 WARMUP=2 LOOP=2 \
#     DATA='benchmarks/.cache/austen_128/*' OUT=/tmp/out PATH=.venv/bin:$PATH \
#     bash benchmarks/gpu/small_long.sh
# (its data: benchmarks/input_pipeline.py builds benchmarks/.cache/austen_128; it leaves
# /tmp/run_electra_3e16, /tmp/export and $OUT to remove afterwards)
set -u
name=electra_3e16
if [ -z "${REHEARSAL:-}" ]; then
  mkdir -p /tmp/chunks && bash .gpu/clast/setup.sh || exit 1
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/nvidia/cuda_nvcc/bin:$PATH \
    XLA_FLAGS="--xla_gpu_cuda_data_dir=/tmp/site/nvidia/cuda_nvcc --xla_gpu_enable_triton_gemm=false" \
    TF_FORCE_GPU_ALLOW_GROWTH=true
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
fi
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
# The console (the run's lines, then the export's) straight into $OUT: it comes back even if
# the call is cut.
EXPORT_ALL=1 bash benchmarks/gpu/pretrain_and_export.sh $name "${LIMIT_S:-520}" \
  "${DATA:-/tmp/data128/pretrain_data-0000[0-8]-*}" /tmp/export \
  NUM_TRAIN_STEPS=${STEPS:-24000} WARMUP_STEPS=${WARMUP:-10000} \
  CHECKPOINT_EVERY=${EVERY:-8000} STEPS_PER_LOOP=${LOOP:-100} >> "$OUT/small_long_$name.log" 2>&1
grep -E "^step [0-9]+/" "$OUT/small_long_$name.log" | awk 'NR % 20 == 1'
tail -n 6 "$OUT/small_long_$name.log"
cat /tmp/export/$name/checkpoint; du -sh /tmp/export/$name
# The latest checkpoint, on its own, as a model dir of its own, back with this call.
latest=$(sed -n 's/^model_checkpoint_path: "\(.*\)"$/\1/p' /tmp/export/$name/checkpoint)
last=/tmp/export/${name}_last
rm -rf "$last" && mkdir -p "$last" && cp /tmp/export/$name/"$latest".* \
  /tmp/export/$name/operative_config.gin /tmp/export/$name/model_info.json "$last"/ \
  && cp -r /tmp/export/$name/train "$last"/ \
  && printf 'model_checkpoint_path: "%s"\nall_model_checkpoint_paths: "%s"\n' "$latest" "$latest" \
    > "$last/checkpoint" || exit 1
if [ -z "${REHEARSAL:-}" ]; then bash benchmarks/gpu/send_back.sh "$last" 0
else echo "rehearsal: $last would be sent back (send_back.sh, which needs the bundle's zstandard)"
fi
