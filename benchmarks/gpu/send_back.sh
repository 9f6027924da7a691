#!/bin/bash
# Send a folder on the device machine back here, within what one call of the device tool
# returns (at most 8 files of 16 MiB, 64 MiB in all): the folder as a zstd-compressed tar in
# 15 MiB pieces under $OUT, at most 4 pieces a call. A weights-only ELECTRA-Small model dir
# with one checkpoint (about 55 MB) is 4 pieces, one call; a bigger folder takes one call
# per 4 pieces, FIRST naming the first piece of each (0, 4, 8, ...; the archive is made by
# the first call and reused by the others while the machine stays warm):
#
#   bash benchmarks/gpu/send_back.sh /tmp/export/electra_oi [FIRST]   (a device call, staged
#                                                                  as make_tf_bundle.sh says)
#   cat /work/.device/N/electra_oi.tar.zst.* | zstd -dc | tar x      (here, once every piece
#                                                                  is in one folder)
set -euo pipefail
if [ $# -lt 1 ] || [ ! -d "$1" ] || [ -z "${OUT:-}" ]; then
  echo "usage: OUT=folder bash benchmarks/gpu/send_back.sh FOLDER [FIRST] (a device call," \
       "whose \$OUT is set; FOLDER must exist)" >&2
  exit 2
fi
dir=$(realpath "$1"); name=$(basename "$dir"); first=${2:-0}
archive=/tmp/send_back/$name.tar.zst
# Made once per folder: a .done file naming another folder (of the same name) makes it anew.
if [ "$(head -n 1 "$archive.done" 2>/dev/null)" != "$dir" ]; then
  mkdir -p /tmp/send_back && rm -f "$archive" "$archive".*
  tar cf - -C "$(dirname "$dir")" "$name" | python3 -c "import sys; sys.path.insert(0, '/tmp/zst'); import zstandard; zstandard.ZstdCompressor(level=10, threads=8).copy_stream(sys.stdin.buffer, sys.stdout.buffer)" > "$archive"
  split -b 15M -d -a 2 "$archive" "$archive."
  { echo "$dir"; sha256sum "$archive"; } > "$archive.done"
fi
pieces=("$archive".[0-9][0-9])
if [ "$first" -ge ${#pieces[@]} ]; then
  echo "FIRST=$first: $name has only ${#pieces[@]} pieces (0 to $(( ${#pieces[@]} - 1 )))" >&2; exit 2
fi
for (( i = first; i < first + 4 && i < ${#pieces[@]}; i++ )); do cp "${pieces[$i]}" "$OUT/"; done
echo "$name: ${#pieces[@]} pieces in all, sent $first to $(( i - 1 ))"; tail -n 1 "$archive.done"
ls -l "$OUT"
