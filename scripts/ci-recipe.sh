#!/usr/bin/env bash
# The CI recipe of docs/ci.md as plain shell: the steps docs/ci/github-actions.yml runs, usable
# in any CI system. A job per target judges it against its expectations file (exit 0 when every
# verdict is the expected one, 1 on a regression or other change); the merge step assembles the
# jobs' reports into one matrix report, diffs it against a baseline report (the diff goes to the
# job summary on GitHub) and judges the matrix against a [columns] expectations file.
#
#   scripts/ci-recipe.sh job TARGET EXPECT OUTDIR [PYTEST_ARGS...]
#       one job: pytest suites/ --mc-target=TARGET --mc-expect=EXPECT --mc-report=OUTDIR/...json
#   scripts/ci-recipe.sh merge OUTDIR BASELINE.json [COLUMNS_EXPECT]
#       OUTDIR/*.json -> OUTDIR/matrix.json, OUTDIR/diff.md (and .txt); exit 1 when the matrix
#       does not match COLUMNS_EXPECT (a [columns] file, e.g. release); the diff never fails it
#   scripts/ci-recipe.sh all OUTDIR BASELINE.json "TARGET EXPECT"... [-- PYTEST_ARGS...]
#       every job, then merge (COLUMNS_EXPECT from $MC_COLUMNS_EXPECT); exit 1 when any failed
#
# Environment: PYTHON (default python3), MC_PYTEST_PATHS (default suites/),
# MC_COLUMNS_EXPECT, GITHUB_STEP_SUMMARY (set by GitHub Actions: the diff is appended to it).
# Example (the test tests/scripts/test_ci_recipe.py runs this, with a small selection):
#   scripts/ci-recipe.sh all out fixtures/reports/release.json \
#       "mooncake mooncake-0.3.13.post1@ha-oplog" "reference:legacy reference-legacy@ha-oplog" \
#       -- -n 2
set -uo pipefail
PYTHON=${PYTHON:-python3}
read -r -a PATHS <<< "${MC_PYTEST_PATHS:-suites/}"

usage() { sed -n '8,14p' "$0" >&2; exit 2; }

# A file name for a target label: mooncake-cuda13==0.3.14 -> mooncake-cuda13-0.3.14
safe() { printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '-' | tr -s '-'; }

job() {
    [ $# -ge 3 ] || usage
    local target=$1 expect=$2 outdir=$3
    shift 3
    mkdir -p "$outdir"
    local report="$outdir/$(safe "$target").json"
    echo "== job $target (expectations $expect) -> $report"
    "$PYTHON" -m pytest -p pytest_mooncake "${PATHS[@]}" -p no:cacheprovider \
        "--mc-target=$target" "--mc-expect=$expect" "--mc-report=$report" "$@"
    local status=$?
    echo "== job $target: exit $status"
    return $status
}

merge() {
    [ $# -ge 2 ] || usage
    local outdir=$1 baseline=$2 columns=${3:-}
    local reports=()
    for f in "$outdir"/*.json; do
        [ -e "$f" ] || continue  # no match: the pattern itself
        case "$f" in */matrix.json) ;; *) reports+=("$f") ;; esac
    done
    [ ${#reports[@]} -gt 0 ] || { echo "merge: no reports in $outdir" >&2; return 2; }
    "$PYTHON" -m pytest_mooncake.report merge "${reports[@]}" -o "$outdir/matrix.json" || return $?
    "$PYTHON" -m pytest_mooncake.report diff "$baseline" "$outdir/matrix.json" > "$outdir/diff.txt"
    local diff_status=$?
    "$PYTHON" -m pytest_mooncake.report diff "$baseline" "$outdir/matrix.json" \
        --format markdown > "$outdir/diff.md"
    cat "$outdir/diff.txt"
    echo "== diff against $baseline: exit $diff_status (0 same, 1 worse, 3 changed, not worse)"
    [ "$diff_status" -le 3 ] && [ "$diff_status" -ne 2 ] || return 2
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
        cat "$outdir/diff.md" >> "$GITHUB_STEP_SUMMARY"
    fi
    if [ -n "$columns" ]; then
        "$PYTHON" -m pytest_mooncake.report check "$outdir/matrix.json" --expect "$columns"
        return $?
    fi
    return 0
}

all() {
    [ $# -ge 2 ] || usage
    local outdir=$1 baseline=$2
    shift 2
    local jobs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do jobs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    local failed=()
    for spec in "${jobs[@]}"; do
        read -r target expect <<< "$spec"
        [ -n "$target" ] && [ -n "$expect" ] || { echo "all: '$spec' is not 'TARGET EXPECT'" >&2; return 2; }
        job "$target" "$expect" "$outdir" "$@" || failed+=("$target")
    done
    merge "$outdir" "$baseline" "${MC_COLUMNS_EXPECT:-}" || failed+=("merge")
    if [ ${#failed[@]} -gt 0 ]; then
        echo "== failed: ${failed[*]}"
        return 1
    fi
    echo "== every job as expected"
}

[ $# -ge 1 ] || usage
command=$1
shift
case "$command" in
    job|merge|all) "$command" "$@" ;;
    *) usage ;;
esac
