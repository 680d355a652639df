#!/usr/bin/env bash
# Records the operator session of docs/operations.md §4: a stuck actor diagnosed with
# doctor, status, inspect and dead-letters, then repaired. Prints the transcript.
#     scripts/record-session.sh > /tmp/session.txt
set -u
cd "$(dirname "$0")/.."
PATH="$PWD/.venv/bin:$PATH"
demo=$(mktemp -d /tmp/solid-demo.XXXX)
export SOLID_ADMIN_APP_DB="sqlite:///$demo/bank.db"
export SOLID_ADMIN_APP_RATES="$demo/rates.json"
export SOLID_ADMIN_APP_OPTIONS='{"max_attempts": 4, "retry_base_delay": 3, "retry_max_delay": 10, "workers": 2}'
export APP=tests.apps.admin_app:runtime
echo '{"EUR": 100}' > "$SOLID_ADMIN_APP_RATES"

run() {  # show the command as typed, its output, and its exit code
  local shown="$1"; shift
  echo "\$ $shown"
  "$@" 2>&1
  echo "[exit $?]"
  echo
}

solid-objects install "$APP" >/dev/null
solid-objects worker "$APP" --health-port 18088 2>"$demo/worker.log" &
worker=$!
sleep 2
python - <<'PY'
from tests.apps.admin_app import Account, runtime
account = runtime.ref(Account, "acct-7")
for amount, currency in ((10, "EUR"), (5, "CHF"), (7, "EUR"), (2, "EUR")):
    account.deposit.send(amount=amount, currency=currency)
runtime.close()
PY
sleep 1.5
run 'solid-objects doctor $APP' solid-objects doctor "$APP"
run 'solid-objects status $APP' solid-objects status "$APP"
run 'solid-objects inspect $APP Account acct-7' solid-objects inspect "$APP" Account acct-7
run 'solid-objects processes list $APP' solid-objects processes list "$APP"
sleep 20   # the remaining attempts run out: the message becomes a dead letter
run 'solid-objects dead-letters list $APP' solid-objects dead-letters list "$APP"
letter=$(solid-objects dead-letters list "$APP" --json | python -c 'import json,sys; print(json.load(sys.stdin)["items"][0]["id"])')
run "solid-objects dead-letters show \$APP $letter" solid-objects dead-letters show "$APP" "$letter"
run "echo '{\"EUR\": 100, \"CHF\": 95}' > \$SOLID_ADMIN_APP_RATES" sh -c "echo '{\"EUR\": 100, \"CHF\": 95}' > '$SOLID_ADMIN_APP_RATES'"
run "solid-objects dead-letters retry \$APP $letter --reason 'CHF rate was missing'" solid-objects dead-letters retry "$APP" "$letter" --reason 'CHF rate was missing'
sleep 1
run 'solid-objects inspect $APP Account acct-7' solid-objects inspect "$APP" Account acct-7
run 'solid-objects doctor $APP --no-round-trip' solid-objects doctor "$APP" --no-round-trip
run 'curl -s localhost:18088/healthz' curl -s localhost:18088/healthz
echo
run 'solid-objects prune $APP --older-than 0s' solid-objects prune "$APP" --older-than 0s
kill -TERM "$worker"; wait "$worker"
rm -rf "$demo"
