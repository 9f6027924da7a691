#!/bin/bash
# The device side of the second part of benchmarks/results/gpu_h200_profile.md: one call of
# the device tool, staged as for profile_runs.sh (all but the last of make_tf_bundle.sh's
# pieces copied to /tmp/chunks by earlier calls; this call carries the last, .gpu/clast and
# benchmarks/.cache/austen_128). Four runs of benchmarks/run_profile.py side by side on the
# one GPU, XLA's Triton GEMMs off (cuBLAS for every matmul: half the compile time, the same
# step time in profile_runs.sh's runs), timed and profiled in turns:
#   gpu_base_call1 / gpu_base_call20     base.gin, batch 128, bf16, XLA, 20 steps per loop,
#                                        pretraining.steps_per_call 1 (one compiled call per
#                                        step, as before) and 20 (the default: one per loop)
#   gpu_small_call1 / gpu_small_call20   the same for small.gin
# Results: $OUT/results.tgz (JSON, Markdown and console logs).
set -u
mkdir -p /tmp/chunks && cp .gpu/c[0-9]*/part* /tmp/chunks/ && bash .gpu/clast/setup.sh || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/nvidia/cuda_nvcc/bin:$PATH \
  XLA_FLAGS="--xla_gpu_cuda_data_dir=/tmp/site/nvidia/cuda_nvcc --xla_gpu_enable_triton_gemm=false" \
  TF_FORCE_GPU_ALLOW_GROWTH=true PYTHONUNBUFFERED=1
limit=${LIMIT_S:-265}
out=/tmp/results && rm -rf $out /tmp/barrier && mkdir -p $out
shared=(--train_data='benchmarks/.cache/austen_128/pretrain_data-0000[0-4]-of-*'
        --results_dir=$out --barrier_dir=/tmp/barrier --peers=4 --peer_wait_s=200 --resume=false)
for size in base small; do
  for k in 1 20; do
    timeout $limit python3 benchmarks/run_profile.py --gin_file=$size.gin \
      --results_name=gpu_${size}_call$k --bindings=pretraining.steps_per_call=$k "${shared[@]}" \
      > $out/gpu_${size}_call$k.log 2>&1 &
  done
done
wait
tar czf "${OUT:-/tmp}/results.tgz" -C $out .
for f in $out/*.md; do sed -n '/^`/,/^| kernel/p' "$f"; done
for f in $out/*.log; do echo "== $f"; grep -v -E "^[WIE]0000|^I1|^INFO|^20[0-9][0-9]-" "$f" | tail -4; done
