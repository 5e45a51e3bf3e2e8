#!/usr/bin/env bash
# A short scripted scenario, run by `make demo` in a throwaway directory.
# Every command is printed ("$ ...") before it runs, as you would type it; lines in parentheses are
# the script's own remarks.
set -euo pipefail

LOKI=${LOKI:-loki}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/loki-demo.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# Bold only on a terminal: a log or a pipe gets the heading as plain text (NO_COLOR turns it off too).
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
  bold() { printf '\n\033[1m%s\033[0m\n' "$*"; }
else
  bold() { printf '\n%s\n' "$*"; }
fi
run() {
  local shown='$' arg
  for arg in "$@"; do
    if [[ "$arg" =~ [[:space:]\'\"] ]]; then shown+=" \"${arg//\"/\\\"}\""; else shown+=" $arg"; fi
  done
  printf '%s\n' "$shown"

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
run sh -c "printf '{\"version\": 1, \"tasks\": [], \"tasks\": []}\\n' > .loki/queue/pending.json"
run $LOKI validate
run $LOKI queue list
cmp -s .loki/queue/pending.json <(printf '{"version": 1, "tasks": [], "tasks": []}\n') && echo "(the file is left byte-for-byte as it was)"
run $LOKI doctor --repair
run $LOKI validate
run ls .loki/queue

bold "3. Three agents claim at the same moment: each gets a different task"
run $LOKI queue add "Add rate limiting to the login endpoint" --priority high --id task-041
run $LOKI queue add "Write integration tests for login" --id task-042
run $LOKI queue add "Document the auth flow" --priority low --id task-043
for agent in eng-001 eng-002 eng-003; do
  printf '$ %s queue claim --agent %s --json > claim-%s.json &\n' "$LOKI" "$agent" "$agent"
  ($LOKI queue claim --agent "$agent" --json > "claim-$agent.json") &
done
printf '$ wait\n'
wait
claimed_id() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["task"]["id"])' "$1"; }
for agent in eng-001 eng-002 eng-003; do
  echo "$agent claimed $(claimed_id "claim-$agent.json")"
done
run $LOKI queue list --state in-progress
for agent in eng-001 eng-002 eng-003; do
  run $LOKI queue complete "$(claimed_id "claim-$agent.json")" --agent "$agent"
done

bold "4. A task that keeps failing backs off, then lands in the dead-letter queue"
echo "(LOKI_NOW fixes the clock, so the demo moves time instead of waiting for the backoff)"
export LOKI_NOW=2030-01-01T00:00:00Z
run $LOKI queue add "Fix the flaky payment webhook test" --id task-044 --max-attempts 3
fail_once() {
  run $LOKI queue claim --agent eng-004
  run $LOKI queue fail task-044 --agent eng-004 --error "AssertionError: expected 200, got 502" \
      --error-type test_failure --approach "$1"
}
fail_once "initial implementation"
run $LOKI queue claim --agent eng-004
export LOKI_NOW=2030-01-01T00:00:05Z
fail_once "mock the upstream"
export LOKI_NOW=2030-01-01T00:00:15Z
fail_once "pin the test clock"
unset LOKI_NOW
run $LOKI queue show task-044
run $LOKI status

bold "5. An API keeps failing: the breaker trips for every agent, then recovers one probe at a time"
export LOKI_NOW=2030-01-01T00:10:00Z
for agent in eng-001 eng-002 eng-003; do
  run $LOKI breaker failure api/claude --error "HTTP 529 overloaded (seen by $agent)"
done
run $LOKI breaker check api/claude
run $LOKI run --breaker api/claude --retries 0 -- echo "calling the API"
export LOKI_NOW=2030-01-01T00:15:00Z
echo "(five minutes later: the cooldown is over)"
run $LOKI breaker check api/claude
run $LOKI breaker check api/claude
run $LOKI breaker success api/claude
for t in 10 20; do
  export LOKI_NOW=2030-01-01T00:15:${t}Z
  run $LOKI breaker check api/claude
  run $LOKI breaker success api/claude
done
run $LOKI breaker capacity api/claude --max 8
unset LOKI_NOW
run cat .loki/logs/circuit-recovery.log

bold "6. Signals: agents drop them in .loki/signals/, one watcher applies each exactly once"
run $LOKI queue add "Add the login rate limit" --id task-201 --type feature
run $LOKI queue add "Rotate the production keys" --id task-202 --type feature
run $LOKI queue claim --agent eng-007 --type feature
run $LOKI signal emit TESTS_PASSED --subject auth --task task-201 summary="42 passed" passed:=42 --agent qa-001
run $LOKI signal emit HUMAN_REVIEW_NEEDED --task task-202 reason=security_decision --severity critical \
    context="Requires AWS production credentials"
run $LOKI signal emit HUMAN_REVIEW_NEEDED reason="a second one never overwrites the first"
run $LOKI signal emit FRICTION_DETECTED friction_id=friction-042 location=src/billing/invoice.py:234 \
    behavior="Sleep 2s before committing"
run sh -c "printf '{\"timestamp\": ' > .loki/signals/BROKEN && touch -d '1 hour ago' .loki/signals/BROKEN"
echo "(a hand-written signal an agent never finished writing)"
run $LOKI signal list
run $LOKI watch --once --no-tui
echo "(the tick also ran the daily dead-letter review: task-044 failed 3 times with one error across 3 approaches)"
run $LOKI abandoned list
run $LOKI approve task-202 --decision approve --note "use the staging keys"
run $LOKI signal log -n 6

bold "7. loki work: two agents run a shell agent over the queue, leases kept alive, failures recorded"
cat > agent.sh <<'EOF'
#!/bin/sh
# A tiny agent: the task arrives in LOKI_* variables (and {placeholders}); exit 0 completes it.
echo "[$LOKI_AGENT] $1: $LOKI_TASK_TITLE (attempt $LOKI_TASK_ATTEMPT)"
case "$LOKI_TASK_TITLE" in
  *flaky*) echo "FAILED tests/test_webhook.py::test_retry - AssertionError: 502 != 200" >&2; exit 1 ;;
esac
printf '{"summary": "%s done by %s"}\n' "$1" "$LOKI_AGENT" > "$LOKI_RESULT_FILE"
EOF
chmod +x agent.sh
run cat agent.sh
run $LOKI queue add "Add pagination to /orders" --id task-301 --type demo --priority high
run $LOKI queue add "Cache the product list" --id task-302 --type demo
run $LOKI queue add "Rewrite the flaky webhook test" --id task-303 --type demo --max-attempts 1
run $LOKI queue add "Document /orders" --id task-304 --type demo --priority low
for agent in eng-010 eng-011; do
  printf '$ %s work --agent %s --type demo -- ./agent.sh {id} &\n' "$LOKI" "$agent"
  $LOKI work --agent "$agent" --type demo -- ./agent.sh {id} 2>&1 &
done
printf '$ wait\n'
wait || true
run $LOKI queue list --state completed --type demo
echo "(task-301's result: exit code, duration, lease renewals and what the agent wrote to \$LOKI_RESULT_FILE)"
$LOKI queue show task-301 --json | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["task"]["result"]))'
run $LOKI deadletter list
echo "(nothing left of type demo: the next loki work has nothing to do, exit 3)"
run $LOKI work --agent eng-010 --type demo -- ./agent.sh {id}

bold "Done. The tree lived in $WORK (removed on exit)."
