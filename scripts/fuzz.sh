#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang, AddressSanitizer and UBSan (in
# build/fuzz), replays the regression corpus, then fuzzes each target for a bounded time from
# seeds that tools/fuzz_seeds.py writes (models, training artifacts, checkpoints, function
# texts) plus what earlier runs kept in build/fuzz/corpus.
#
#   scripts/fuzz.sh --minutes 10                # 10 minutes per target
#   scripts/fuzz.sh --seconds 20 --targets fuzz_checkpoint
#   scripts/fuzz.sh --replay-only               # the regression corpus alone
#
# A crash leaves its input in build/fuzz/crashes/<target>/ and fails the script; copy it to
# tests/fuzz/regressions/<target>/ with the fix, where this script and
# tests/python/test_fuzz_corpus.py replay it from then on.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

seconds=60
targets="fuzz_model fuzz_checkpoint fuzz_function_text"
replay_only=0
while (($#)); do
  case "$1" in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    --replay-only) replay_only=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

scripts/bootstrap.sh > /dev/null
build=build/fuzz
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DONNXTRAIN_FUZZ=ON -DONNXTRAIN_SANITIZE=address,undefined -DONNXTRAIN_NATIVE=OFF \
    -DONNXTRAIN_BUILD_TESTS=OFF -DONNXTRAIN_BUILD_PYTHON=OFF -DPython_EXECUTABLE="$root/.venv/bin/python" > /dev/null
fi
cmake --build "$build" --target $targets

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
bin=$build/tests/fuzz
status=0
for target in $targets; do
  inputs=(tests/fuzz/regressions/"$target"/*)  # dot files (.keep) are not inputs
  [ -e "${inputs[0]}" ] || continue
  echo "== $target: replaying ${#inputs[@]} regression inputs"
  "$bin/$target" -rss_limit_mb=4096 "${inputs[@]}" || status=1
done
((replay_only)) && exit $status

.venv/bin/python tools/fuzz_seeds.py "$build/seeds"
for target in $targets; do
  corpus=$build/corpus/$target crashes=$build/crashes/$target
  mkdir -p "$corpus" "$crashes"
  echo "== $target: fuzzing for ${seconds} s"
  # Fork mode goes on past an input that only asks for more memory than the limit (a valid
  # model may: Expand to 10^8 rows) or runs longer than the timeout; those are kept as oom-*
  # and timeout-* for a look, while crash-* and leak-* (sanitizer reports, escaped
  # exceptions) fail the script.
  "$bin/$target" "$corpus" "$build/seeds/$target" -fork=1 -ignore_ooms=1 -ignore_timeouts=1 \
    -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=262144 -timeout=30 -artifact_prefix="$crashes/" \
    > "$build/$target.log" 2>&1 || true
  grep -E "^#[0-9]+: cov|DONE|ERROR|SUMMARY" "$build/$target.log" | tail -n 3
  for kind in oom timeout; do
    found=$(find "$crashes" -name "$kind-*" | wc -l)
    ((found)) && echo "fuzz.sh: $target: $found $kind inputs kept in $crashes (not failures)"
  done
  found=$(find "$crashes" -name "crash-*" -o -name "leak-*" | wc -l)
  if ((found)); then
    echo "fuzz.sh: $target found $found crashing inputs in $crashes (log: $build/$target.log)" >&2
    status=1
  fi
done
exit $status
