#!/bin/bash
# The device side of the fourth H100 lease (benchmarks/results/gpu_h100.md): one call of the
# device tool, after earlier calls copied all of make_tf_bundle.sh's pieces to /tmp/chunks
# and the study's seq-128 TFRecords (benchmarks/study/make_corpus.py, then
# build_pretraining_data.py --max_seq_length=128 --compression=gzip) to /tmp/data128; this
# call carries .gpu/clast. XLA's Triton GEMMs off throughout (cuBLAS for every matmul: half
# the compile time, the same step time in gpu_h200_profile.md). Side by side on the one GPU:
#   electra_oi, mlm_oi   ELECTRA-Small and BERT-Small (small.gin, bf16, XLA) at 1.0e16 FLOPs
#                        each, with the official initialisation (the default since
#                        2026-11-25): otherwise the second and third leases' pair
#                        (gpu_small_transfer*.md), by benchmarks/gpu/pretrain_and_export.sh;
#   gpu_h100_base_b128   benchmarks/run_profile.py: base.gin at batch 128 (no profile)
#   gpu_h100_base_b256   and at base.gin's own batch 256 (profiled),
# the two base runs compiling while the pair does, their timed loops after the pair has
# finished (the pair holds run_profile.py's barrier lock), one at a time.
# Results: the pair's console logs in $OUT and run_profile.py's JSON, Markdown and console
# logs in $OUT/profile/ (written there directly, so that they come back even if the call runs
# out of time): 8 files, all one call returns. The pair's weights-only model dirs (with their
# TensorBoard runs) stay in /tmp/export/{electra_oi,mlm_oi}, 55 MB each: send each back by a
# call of its own, `bash benchmarks/gpu/send_back.sh /tmp/export/electra_oi`, right after
# this one (the machine is given back 30 s after a call ends).
set -u
mkdir -p /tmp/chunks && bash .gpu/clast/setup.sh || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/nvidia/cuda_nvcc/bin:$PATH \
  XLA_FLAGS="--xla_gpu_cuda_data_dir=/tmp/site/nvidia/cuda_nvcc --xla_gpu_enable_triton_gemm=false" \
  TF_FORCE_GPU_ALLOW_GROWTH=true PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
res=$OUT/profile && rm -rf /tmp/barrier /tmp/export && mkdir -p $res /tmp/barrier
data='/tmp/data128/pretrain_data-0000[0-8]-*'
pair_limit=${PAIR_LIMIT_S:-450}
(
  exec 9>/tmp/barrier/lock && flock -x 9
  bash benchmarks/gpu/pretrain_and_export.sh electra_oi "$pair_limit" "$data" /tmp/export \
    NUM_TRAIN_STEPS=7900 WARMUP_STEPS=1000 CHECKPOINT_EVERY=1000 > /dev/null 2>&1 &
  GIN_EXTRA=ablations/mlm.gin bash benchmarks/gpu/pretrain_and_export.sh mlm_oi "$pair_limit" \
    "$data" /tmp/export NUM_TRAIN_STEPS=10456 WARMUP_STEPS=1000 CHECKPOINT_EVERY=1000 \
    > /dev/null 2>&1 &
  wait
  cp /tmp/export/pretrain_*.log "$OUT/"
) &
sleep 2  # the pair takes the lock first
for batch in 128 256; do
  profile=$([ $batch = 256 ] && echo true || echo false)
  timeout ${BASE_LIMIT_S:-530} nice -n 5 python3 benchmarks/run_profile.py --gin_file=base.gin \
    --batch_size=$batch --train_data="$data" --results_name=gpu_h100_base_b$batch \
    --results_dir=$res --barrier_dir=/tmp/barrier --peers=1 --resume=false \
    --profile=$profile > $res/gpu_h100_base_b$batch.log 2>&1 &
done
wait
for name in electra_oi mlm_oi; do echo "== $name"; tail -3 "$OUT/pretrain_$name.log"; done
for f in $res/*.md; do sed -n '/^`/,/^| kernel/p' "$f"; done
for f in $res/*.log; do echo "== $f"; grep -v -E "^[WIE]0000|^I1|^INFO|^20[0-9][0-9]-" "$f" | tail -4; done
