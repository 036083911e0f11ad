#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang, AddressSanitizer and UBSan
# (scripts/sanitized_build.sh, in build/sanitize), replays the regression corpus, then fuzzes
# each target for a bounded time from seeds that tools/fuzz_seeds.py writes (models, training artifacts, checkpoints, function
# texts) plus what earlier runs kept in build/fuzz/corpus. fuzz_graph is the Python target
# (tests/fuzz/fuzz_graph.py, atheris): it runs the onnxtrain that Python imports (.venv's, or
# PYTHONPATH's), and atheris is installed on first use into ~/.cache/onnxtrain/atheris-VERSION.
#
#   scripts/fuzz.sh --minutes 10                # 10 minutes per target
#   scripts/fuzz.sh --seconds 20 --targets fuzz_checkpoint
#   scripts/fuzz.sh --replay-only               # the regression corpus alone
#   scripts/fuzz.sh --seconds 30 --seed 1       # the same mutations each time (the CI slice)
#
# A crash leaves its input in build/fuzz/crashes/<target>/ and fails the script; copy it to
# tests/fuzz/regressions/<target>/ with the fix, where this script and
# tests/python/test_fuzz_corpus.py replay it from then on (fuzz_graph keeps the finding's model
# and feeds as a .npz there: that is what goes into the regression folder).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

seconds=60
targets="fuzz_model fuzz_checkpoint fuzz_function_text fuzz_graph"
replay_only=0
seed=0  # libFuzzer's: 0 draws one from the clock
while (($#)); do
  case "$1" in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    --replay-only) replay_only=1; shift ;;
    --seed) seed=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

scripts/bootstrap.sh > /dev/null
build=build/sanitize  # scripts/sanitized_build.sh's; its fuzzing state goes into build/fuzz
native=$(echo " $targets " | sed 's/ fuzz_graph / /')
# shellcheck disable=SC2086
[ -n "${native// /}" ] && scripts/sanitized_build.sh $native
bin=$build/tests/fuzz
build=build/fuzz
mkdir -p "$build"
if [[ " $targets " == *" fuzz_graph "* ]]; then
  atheris=$HOME/.cache/onnxtrain/atheris-3.0.0
  [ -f "$atheris/atheris/__init__.py" ] ||
    .venv/bin/python -m pip install -q --no-deps --target "$atheris" atheris==3.0.0
  export PYTHONPATH="$atheris${PYTHONPATH:+:$PYTHONPATH}"
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# How a target runs: a libFuzzer binary, or the Python harness under atheris (one thread each).
fuzzer() {
  if [ "$1" = fuzz_graph ]; then
    # A fixed --seed fixes Python's hash seed too: set order steers the coverage that guides
    # the mutations, so without it the same seed takes another path each run.
    local hash_seed=$seed
    ((seed)) || hash_seed=random
    OMP_NUM_THREADS=1 PYTHONHASHSEED=$hash_seed .venv/bin/python tests/fuzz/fuzz_graph.py "${@:2}"
  else
    "$bin/$1" "${@:2}"
  fi
}
status=0
for target in $targets; do
  inputs=(tests/fuzz/regressions/"$target"/*)  # dot files (.keep) are not inputs
  [ -e "${inputs[0]}" ] || continue
  echo "== $target: replaying ${#inputs[@]} regression inputs"
  if [ "$target" = fuzz_graph ]; then
    .venv/bin/python tests/fuzz/fuzz_graph.py --replay "${inputs[@]}" || status=1
  else
    "$bin/$target" -rss_limit_mb=4096 "${inputs[@]}" || status=1
  fi
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
  if [ "$target" = fuzz_graph ]; then
    # atheris has no fork mode: one process; a finding ends the run (its model and feeds are
    # kept as a .npz beside the crash input).
    FUZZ_GRAPH_FINDINGS=$crashes fuzzer "$target" "$corpus" "$build/seeds/$target" -max_total_time="$seconds" \
      -seed="$seed" -rss_limit_mb=4096 -max_len=1024 -timeout=60 -artifact_prefix="$crashes/" > "$build/$target.log" 2>&1 || true
    grep -E "^#[0-9]+.*(pulse|DONE)|Done [0-9]+ runs|ERROR|SUMMARY" "$build/$target.log" | tail -n 3
  else
    fuzzer "$target" "$corpus" "$build/seeds/$target" -fork=1 -ignore_ooms=1 -ignore_timeouts=1 \
      -max_total_time="$seconds" -seed="$seed" -rss_limit_mb=4096 -max_len=262144 -timeout=30 -artifact_prefix="$crashes/" \
      > "$build/$target.log" 2>&1 || true
    grep -E "^#[0-9]+: cov|DONE|ERROR|SUMMARY" "$build/$target.log" | tail -n 3
  fi
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
