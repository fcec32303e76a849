#!/bin/sh
# `make demo`: the bundled fixtures through every step a new user takes, in under 40 lines of 100 columns. Each
# step shows its command as typed and the lines of its report that tell the outcome; the whole report is kept in
# build/demo/<step>.txt. tests/test_demo.py runs this script and holds it to that size.
set -u
LCM_ETL=${LCM_ETL:-.venv/bin/lcm-etl}
OUT=build/demo
TARGET=$OUT/lcm.sqlite
DB=fixtures/lossless-claw/multiparent-newest.db
STATES=""
for s in cold evicted archive-tier pending; do STATES="$STATES --sessions fixtures/openclaw-hidden/$s/state"; done
rm -rf "$OUT" && mkdir -p "$OUT" || exit 1
# the kept snapshots go beside the demo's target, not into ~/.cache: `rm -rf build` removes every trace
export LCM_ETL_CACHE_DIR="$OUT/cache"
export LCM_ETL_WIDTH=96   # the reports' lines are indented by 4 below

step() {   # step NAME EXIT-CODE PATTERN COMMAND-AS-SHOWN ARGS...: run it, show the lines matching PATTERN
    name=$1 want=$2 pattern=$3 shown=$4
    shift 4
    printf '\n$ %s\n' "$shown"
    "$LCM_ETL" "$@" >"$OUT/$name.txt" 2>&1
    code=$?
    # the lines matching PATTERN, each with its wrapped continuation (indented 4 more: lcm_etl/report.py, fit)
    awk -v re="$pattern" '{ n = match($0, /[^ ]/) - 1 }
        $0 ~ re { keep = n + 4; print "    " $0; next }
        keep && n == keep { print "    " $0; next } { keep = 0 }' "$OUT/$name.txt"
    if [ "$code" -ne "$want" ]; then
        echo "demo: \`lcm-etl $1\` exited $code, not $want: $OUT/$name.txt says why" >&2
        exit 1
    fi
}

echo "lcm-etl demo: OpenClaw's memory, from the bundled fixtures, into a new Remnic LCM store"
echo "  DB=$DB   (lossless-claw's lcm.db)"
echo "  STATES: --sessions fixtures/openclaw-hidden/X/state, X: cold, evicted, archive-tier, pending"
echo "          (OpenClaw state folders: session stores, cold storage, archives, a pending input)"

step 1-inspect 0 '^(schema|rows|sessions):' \
    "lcm-etl inspect --src \$DB                                    # what lcm.db holds" \
    inspect --src "$DB"
step 2-migrate 0 '^lcm-etl|^  (messages|parts|summaries) ' \
    "lcm-etl migrate --src \$DB --dest $TARGET          # into Remnic's store" \
    migrate --src "$DB" --dest "$TARGET"
# shellcheck disable=SC2086   # STATES is four options
step 3-audit 3 '^lcm-etl|would import' \
    "lcm-etl audit --src \$DB \$STATES --dest $TARGET    # exit 3: OpenClaw has more" \
    audit --src "$DB" $STATES --dest "$TARGET"
# shellcheck disable=SC2086
step 4-reconcile 0 '^lcm-etl|^  (messages|transcripts) ' \
    "lcm-etl reconcile --src \$DB \$STATES --dest $TARGET  # bring it in" \
    reconcile --src "$DB" $STATES --dest "$TARGET"
# shellcheck disable=SC2086
step 5-audit 0 '^lcm-etl' \
    "lcm-etl audit --src \$DB \$STATES --dest $TARGET    # exit 0: all there" \
    audit --src "$DB" $STATES --dest "$TARGET"

echo
echo "The result: $TARGET, a Remnic LCM store (Remnic reads <memory dir>/state/lcm.sqlite)."
echo "The reports in full: $OUT/1-inspect.txt ... $OUT/5-audit.txt. Next, try:"
echo "  $LCM_ETL runs --dest $TARGET                     # its ledger: every run"
echo "  $LCM_ETL undo RUN_ID --dest $TARGET --dry-run    # what an undo removes"
echo "  $LCM_ETL migrate --help                                     # for your own lcm.db"
