#!/bin/bash
# The device side of benchmarks/results/gpu_h200_profile.md: one call of the device tool,
# after earlier calls copied all but the last of make_tf_bundle.sh's pieces to /tmp/chunks; this
# call carries the last (.gpu/cNN), .gpu/clast and benchmarks/.cache/austen_128 (the embedded corpus's
# TFRecords). It assembles TensorFlow, then runs benchmarks/run_profile.py three times side
# by side on the one GPU (each compiles while the others do; the timed and profiled loops
# take turns, see run_profile.py):
#   gpu_base            base.gin, batch 128 x seq 128, bf16, XLA: throughput, MFU, a kernel
#                       profile (trace kept) and a resumed run with the XLA cache;
#   gpu_base_cublas     the same with XLA's Triton GEMMs off (cuBLAS for every matmul),
#                       at the lowest CPU priority;
#   gpu_tiny_float16    tiny.gin with mixed_float16 (loss scaling) on the GPU.
# Results: $OUT/results.tgz (JSON, Markdown and console logs) and $OUT/gpu_base.xplane.pb.gz.
set -u
mkdir -p /tmp/chunks && cp .gpu/c[0-9]*/part* /tmp/chunks/ && bash .gpu/clast/setup.sh || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/nvidia/cuda_nvcc/bin:$PATH \
  XLA_FLAGS=--xla_gpu_cuda_data_dir=/tmp/site/nvidia/cuda_nvcc \
  TF_FORCE_GPU_ALLOW_GROWTH=true PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
out=/tmp/results && rm -rf $out /tmp/barrier && mkdir -p $out
shared=(--train_data='benchmarks/.cache/austen_128/pretrain_data-0000[0-4]-of-*'
        --results_dir=$out --barrier_dir=/tmp/barrier --peers=3)
timeout 530 python3 benchmarks/run_profile.py --gin_file=base.gin --results_name=gpu_base \
  "${shared[@]}" --peer_wait_s=60 --keep_trace > $out/gpu_base.log 2>&1 &
XLA_FLAGS="$XLA_FLAGS --xla_gpu_enable_triton_gemm=false" timeout 515 nice -n 19 \
  python3 benchmarks/run_profile.py --gin_file=base.gin --results_name=gpu_base_cublas \
  "${shared[@]}" --peer_wait_s=300 --resume=false > $out/gpu_base_cublas.log 2>&1 &
timeout 515 nice -n 19 python3 benchmarks/run_profile.py --gin_file=tiny.gin \
  --precision=mixed_float16 --results_name=gpu_tiny_float16 "${shared[@]}" \
  --peer_wait_s=300 --resume=false > $out/gpu_tiny_float16.log 2>&1 &
wait
mv $out/gpu_base.xplane.pb.gz "${OUT:-/tmp}/" 2>/dev/null
tar czf "${OUT:-/tmp}/results.tgz" -C $out .
cat $out/*.md 2>/dev/null
for f in $out/*.log; do echo "== $f"; grep -v -E "^[WI]0000|^I1|^INFO" "$f" | tail -15; done
