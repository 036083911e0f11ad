#!/usr/bin/env bash
# Power loss during CheckpointState.save_checkpoint: 100 simulated failures (kill -9, power cut
# dropping unsynced data and undoing un-fsynced renames, torn write, EIO) at random write/fsync/
# rename calls of a save over an existing checkpoint; each time the path must hold the old or
# the new checkpoint, loadable with its checksums verified. See tests/power_loss/.
#   scripts/power_loss_check.sh [--runs N] [--control] [--build DIR]
# --control saves with a naive writer (no fsync) instead, to show the check catches losses.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build/dev"
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
python="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
out="$build/power_loss"
mkdir -p "$out"
cc -O1 -Wall -shared -fPIC -o "$out/lost_writes.so" "$root/tests/power_loss/lost_writes.c" -ldl
rm -rf "$out/work"
PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" LD_PRELOAD="$out/lost_writes.so" \
  "$python" "$root/tests/power_loss/check.py" --folder "$out/work" "${args[@]}"
