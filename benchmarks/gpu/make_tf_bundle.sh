#!/bin/bash
# Stage TensorFlow 2.20 (cp312) and the CUDA 12.5 libraries its GPU step loads for a lent
# GPU machine that has Python 3.12 but no TensorFlow and no package registry, in pieces
# small enough to carry one per call (the device tool carries at most 64 MiB, working tree
# included). Run here, from the repository root; it writes the git-ignored .gpu/:
#
#   bash benchmarks/gpu/make_tf_bundle.sh [DATA_DIR]
#
#   .gpu/c00 .. .gpu/cNN   one zstd piece each (53 MiB); carry them one per call, in order,
#                          each call running: mkdir -p /tmp/chunks && cp .gpu/cXX/part* /tmp/chunks/
#   .gpu/clast             the zstandard, numpy and ml_dtypes wheels, DATA_DIR (pre-training
#                          TFRecords, optional; at most about 30 MB) and setup.sh; carried
#                          last, its call runs `bash .gpu/clast/setup.sh`, which assembles
#                          /tmp/site (and copies DATA_DIR to /tmp/data).
#
# Then every call that runs TensorFlow starts with
#   export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/nvidia/cuda_nvcc/bin:$PATH \
#     XLA_FLAGS=--xla_gpu_cuda_data_dir=/tmp/site/nvidia/cuda_nvcc
# (a carried folder is gone in a call that does not carry it; /tmp stays while the machine
# is held, and it goes back 30 s after a call ends: make the calls back to back).
#
# What is left out, to fit: TensorFlow's C++ headers; cuDNN's adv and engine libraries (the
# pre-training step calls no cuDNN kernel); cuFFT, cuSOLVER and cuSPARSE, replaced by empty
# libraries of the same name (TensorFlow only opens them at start-up); cuRAND, NVRTC
# and nvJitLink (not on TensorFlow's library path); CUPTI is in, for TensorFlow's profiler
# (benchmarks/run_profile.py). Not included: tensorflow-text
# (62 MB), which fine-tuning's tokenizer needs. Pure-Python packages (keras, gin, orbit,
# tf_keras, tensorboard and TensorFlow's small dependencies) are copied from .venv, which
# must be this project's installed environment. Recorded use: benchmarks/results/gpu_h100.md.
set -euo pipefail
data=${1:-}
root=$(pwd)
out=$root/.gpu
if [ -n "$data" ]; then
  # Checked before anything is downloaded, and kept out of .gpu/, which is rebuilt from scratch.
  [ -d "$data" ] || { echo "DATA_DIR $data: no such directory; pass a folder of pre-training TFRecords" >&2; exit 2; }
  data=$(realpath "$data")
  case "$data/" in "$out"/*)
    echo "DATA_DIR $data: inside .gpu/, which this script deletes; move it elsewhere first" >&2; exit 2;;
  esac
fi
venv_site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo "/.gpu/" >> .git/info/exclude; }
rm -rf "$out" && mkdir -p "$out/whl" "$out/site"
pip_download() {
  .venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$out/whl" "$@"
}
pip_download tensorflow==2.20.0 nvidia-cublas-cu12==12.5.3.2 nvidia-cuda-nvcc-cu12==12.5.82 \
  nvidia-cuda-runtime-cu12==12.5.82 nvidia-cuda-cupti-cu12==12.5.82 nvidia-cudnn-cu12==9.3.0.75 optree==0.20.0 protobuf==7.36.2
pip_download zstandard==0.25.0 numpy==2.4.6 ml_dtypes==0.6.0
cd "$out/site"
for w in "$out"/whl/tensorflow-*.whl "$out"/whl/nvidia_*.whl "$out"/whl/optree-*.whl \
         "$out"/whl/protobuf-*.whl; do
  unzip -q -o "$w"
done
rm -rf tensorflow/include nvidia/cublas/lib/libnvblas.so.* nvidia/*/include \
  nvidia/cuda_nvcc/nvvm/include nvidia/cuda_nvcc/nvvm/lib64 \
  nvidia/cudnn/lib/libcudnn_adv.so.* nvidia/cudnn/lib/libcudnn_engines_*.so.* ./*.dist-info/RECORD
echo 'void electra_tf_stub(void) {}' > "$out/stub.c"
for lib in cufft/lib/libcufft.so.11 cusolver/lib/libcusolver.so.11 cusparse/lib/libcusparse.so.12; do
  mkdir -p "nvidia/$(dirname $lib)"
  gcc -shared -fPIC -Wl,-soname,"$(basename $lib)" -o "nvidia/$lib" "$out/stub.c"
done
for p in keras gin orbit astunparse gast pasta termcolor namex tensorboard tf_keras; do
  cp -r "$venv_site/$p" .
done
find . -name __pycache__ -type d -prune -exec rm -rf {} +
tar cf - . | zstd -q -12 --long=27 -T0 -o "$out/bundle.tar.zst"
cd "$out"
split -b 53M -d -a 2 bundle.tar.zst part
for p in part*; do mkdir -p "c${p#part}" && mv "$p" "c${p#part}/"; done
mkdir -p clast
cp whl/zstandard-*.whl whl/numpy-*.whl whl/ml_dtypes-*.whl clast/
[ -z "$data" ] || cp -r "$data" clast/data
cat > clast/setup.sh <<'EOF'
# Assemble /tmp/site from the carried pieces (run from the repository root on the device).
set -euo pipefail
mkdir -p /tmp/zst /tmp/site
python3 -m zipfile -e .gpu/clast/zstandard-*.whl /tmp/zst
cat /tmp/chunks/part* | python3 -c "import sys; sys.path.insert(0, '/tmp/zst'); import zstandard; zstandard.ZstdDecompressor(max_window_size=2**27).copy_stream(sys.stdin.buffer, sys.stdout.buffer)" | tar x -C /tmp/site
for w in .gpu/clast/numpy-*.whl .gpu/clast/ml_dtypes-*.whl; do python3 -m zipfile -e "$w" /tmp/site; done
chmod +x /tmp/site/nvidia/cuda_nvcc/bin/ptxas
[ ! -d .gpu/clast/data ] || cp -r .gpu/clast/data /tmp/data
PYTHONPATH=/tmp/site python3 -c "import tensorflow as tf, orbit; print('TensorFlow', tf.__version__, tf.config.list_physical_devices('GPU'))"
EOF
rm -rf site whl stub.c bundle.tar.zst
du -sh c* | tr '\n' ' '; echo
