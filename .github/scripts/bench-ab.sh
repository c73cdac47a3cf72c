#!/usr/bin/env bash
# The regression gate's runs and verdict, as .github/workflows/bench.yml calls them (and
# tests/integration/test_ci_workflow.py runs them here):
#
#   bench-ab.sh runs   REPEATS runs of WORKLOAD on the base checkout (BASE_DIR) and on this one,
#                      interleaved (base, head, head, base, ...), with the one virtualenv
#                      PYTHON belongs to; results in OUT/base/<i>/ and OUT/head/<i>/.
#   bench-ab.sh gate   bench gate of every head run against every base run, then compare of
#                      the first pair; writes OUT/gate.md, OUT/gate-junit.xml, OUT/compare.html
#                      and exits with the gate's code (0 pass, 1 regression, 2 bad input,
#                      which includes runs whose identities differ: docs/reports.md, "Like
#                      with like"). ALLOW_DIFFERENT (space-separated identity keys) passes
#                      --allow-different KEY to both, for a change that alters them on purpose.
#
# The base revision runs its own code (PYTHONPATH and the working folder are its checkout) on
# the dependencies installed once for the head: a change of pinned dependencies in the pull
# request is therefore measured on both sides.
set -euo pipefail

: "${BASE_DIR:?BASE_DIR: a checkout of the base revision}"
WORKLOAD=${WORKLOAD:-workloads/ci-gate.yaml}
OUT=${OUT:-bench}
REPEATS=${REPEATS:-5}
PYTHON=${PYTHON:-.venv/bin/python}
BENCH_ARGS=${BENCH_ARGS:-}
GATE_ARGS=${GATE_ARGS:-}
ALLOW_DIFFERENT=${ALLOW_DIFFERENT:-}

head_dir=$(pwd)
base_dir=$(realpath "$BASE_DIR")
py=$(realpath -s "$PYTHON")
workload=$(realpath "$WORKLOAD")
out=$(realpath -m "$OUT")

run_side() {  # side checkout index
    local side=$1 dir=$2 i=$3
    echo "bench-ab: $side run $i of $REPEATS" >&2
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
    (cd "$dir" && BENCH_BRANCH="$side" PYTHONPATH="$dir" "$py" -m harness run "$workload" \
        --results "$out/$side/$i" $BENCH_ARGS >&2)
}

case "${1:-}" in
runs)
    for i in $(seq 1 "$REPEATS"); do
        if (( i % 2 )); then
            run_side base "$base_dir" "$i"; run_side head "$head_dir" "$i"
        else
            run_side head "$head_dir" "$i"; run_side base "$base_dir" "$i"
        fi
    done
    ;;
gate)
    shopt -s nullglob
    head_runs=("$out"/head/*/*/)
    base_runs=("$out"/base/*/*/)
    if (( ${#head_runs[@]} == 0 || ${#base_runs[@]} == 0 )); then
        echo "bench-ab: no runs under $out/head or $out/base (run \`$0 runs\` first)" >&2
        exit 2
    fi
    allow=()
    for key in $ALLOW_DIFFERENT; do allow+=(--allow-different "$key"); done
    "$py" -m harness compare "${base_runs[0]}" "${head_runs[0]}" --out "$out/compare.html" \
        "${allow[@]}"
    # shellcheck disable=SC2086  # GATE_ARGS is a list of options
    "$py" -m harness gate "${head_runs[@]}" --baseline "${base_runs[@]}" \
        --junit "$out/gate-junit.xml" --markdown "$out/gate.md" "${allow[@]}" $GATE_ARGS
    ;;
*)
    echo "usage: $0 runs|gate (BASE_DIR=... WORKLOAD=... OUT=... REPEATS=...)" >&2
    exit 2
    ;;
esac
