#!/bin/bash
# Send a folder on the device machine back here, within what one call of the device tool
# returns (at most 8 files of 16 MiB, 64 MiB in all): the folder as a zstd-compressed tar in
# 15 MiB pieces under $OUT. A weights-only ELECTRA-Small model dir (about 55 MB) is 4 pieces,
# so one call per model dir:
#
#   bash benchmarks/gpu/send_back.sh /tmp/export/electra_oi      (a device call, staged as
#                                                                 make_tf_bundle.sh says)
#   cat /work/.device/N/electra_oi.tar.zst.? | zstd -dc | tar x  (here, where it should go)
set -euo pipefail
dir=$(realpath "$1"); name=$(basename "$dir")
tar cf - -C "$(dirname "$dir")" "$name" | python3 -c "import sys; sys.path.insert(0, '/tmp/zst'); import zstandard; zstandard.ZstdCompressor(level=10, threads=8).copy_stream(sys.stdin.buffer, sys.stdout.buffer)" > "/tmp/$name.tar.zst"
split -b 15M -d -a 1 "/tmp/$name.tar.zst" "$OUT/$name.tar.zst."
sha256sum "/tmp/$name.tar.zst"; ls -l "$OUT"
