#!/usr/bin/env bash
# A short scripted scenario, run by `make demo` in a throwaway directory.
# Every command is printed before it runs, exactly as you would type it.
set -euo pipefail

LOKI=${LOKI:-loki}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/loki-demo.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

bold() { printf '\n\033[1m%s\033[0m\n' "$*"; }
run() {
  printf '$ %s\n' "$*"
  set +e
  "$@" 2>&1
  local code=$?
  set -e
  if [ "$code" -ne 0 ]; then printf '(exit %d)\n' "$code"; fi
  return 0
}

bold "1. A fresh .loki/ tree"
run $LOKI init
run $LOKI status
run $LOKI validate

bold "2. A hand edit that breaks a file is caught, named, and never overwritten"
cp .loki/queue/pending.json pending.backup
printf '{"version": 1, "tasks": [], "tasks": []}\n' > .loki/queue/pending.json
run $LOKI validate
cmp -s .loki/queue/pending.json <(printf '{"version": 1, "tasks": [], "tasks": []}\n') && echo "(file left byte-for-byte as it was)"
run $LOKI doctor --repair
run $LOKI validate
ls .loki/queue | grep corrupt || true

bold "Done. The tree lived in $WORK (removed on exit)."
