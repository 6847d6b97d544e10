#!/usr/bin/env bash
# Contract tests (`npm run test:contract`): the real server on a fixture model, probed by
# `mashbox conformance` (schemathesis + stream checks) against openapi.json. Zero failures required.
#
# Checks: not_a_server_error, status_code_conformance, content_type_conformance,
# response_schema_conformance. Every operation is tested, streamed answers included: schemathesis
# reads a text/event-stream body to its end and validates every event's JSON data against the
# payload schema openapi.json gives it (contentSchema), as it does for JSON bodies. Then each
# streamed operation's documented example must end with its closing event (data: [DONE],
# message_stop, response.completed).
#
# Cost stays bounded on 2 cores: --ctx 512 caps any generation (schemathesis may ask for a huge
# max_tokens), --slots 2 keeps the batch small, one worker sends one request at a time, and
# MASHBOX_CONTRACT_EXAMPLES caps the cases per operation.
#
# Environment:
#   MASHBOX_CONTRACT_MODEL     fixture GGUF (default test/fixtures/llama-q8_0.gguf; made by npm run fixtures)
#   MASHBOX_CONTRACT_PORT      port (default 18931)
#   MASHBOX_CONTRACT_EXAMPLES  max examples per operation (default 15)
#   MASHBOX_CONTRACT_SEED      hypothesis seed (default 1; fixed so a failure reproduces)
#   MASHBOX_CONTRACT_TIMEOUT   seconds after which the schemathesis run is stopped and fails (default 900)
#   MASHBOX_CONTRACT_REPORT    folder for the server log, junit report and output (default: a new temp folder)
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${MASHBOX_CONTRACT_PORT:-18931}"
MODEL="${MASHBOX_CONTRACT_MODEL:-test/fixtures/llama-q8_0.gguf}"
EXAMPLES="${MASHBOX_CONTRACT_EXAMPLES:-15}"
SEED="${MASHBOX_CONTRACT_SEED:-1}"
TIMEOUT="${MASHBOX_CONTRACT_TIMEOUT:-900}"
REPORT="${MASHBOX_CONTRACT_REPORT:-$(mktemp -d -t mashbox-contract.XXXXXX)}"
BASE="http://127.0.0.1:${PORT}"
mkdir -p "$REPORT"

command -v st >/dev/null || { echo "contract: schemathesis is not installed (pip install -r requirements-ci.txt)" >&2; exit 2; }
[ -f bin/mashbox.js ] || { echo "contract: bin/mashbox.js is missing (the server is not built yet)" >&2; exit 2; }
[ -f "$MODEL" ] || npm run fixtures
# openapi.json must be what codegen writes: the contract under test is the committed one.
node codegen/generate.mjs --check

SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    # Give it time to stop its worker; then make sure.
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT INT TERM

node bin/mashbox.js run "$MODEL" --port "$PORT" --slots 2 --ctx 512 >"$REPORT/server.log" 2>&1 &
SERVER_PID=$!

echo "contract: waiting for $BASE/v1/health (server log: $REPORT/server.log)"
ready=""
for _ in $(seq 240); do
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "contract: the server exited" >&2; tail -30 "$REPORT/server.log" >&2; exit 1; }
  if [ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/v1/health" || true)" = "200" ]; then ready=1; break; fi
  sleep 0.5
done
[ -n "$ready" ] || { echo "contract: /v1/health was not 200 within 120 s" >&2; tail -30 "$REPORT/server.log" >&2; exit 1; }

# The checks themselves are `mashbox conformance` (src/conformance/), the command users run against
# their own deployments: it fills the running model's id into the contract's examples, runs
# schemathesis and the stream checks, and prints one line per failure and "N passed, N failed".
set +e
node bin/mashbox.js conformance "$BASE" \
  --examples "$EXAMPLES" \
  --seed "$SEED" \
  --timeout "$TIMEOUT" \
  --request-timeout 120 \
  --report-dir "$REPORT"
status=$?
set -e
[ "$status" = 0 ] || echo "contract: schemathesis output with a curl line per failing case: $REPORT/schemathesis.txt"

kill -0 "$SERVER_PID" 2>/dev/null || { echo "contract: the server died during the run" >&2; tail -30 "$REPORT/server.log" >&2; exit 1; }
echo "contract: conformance exit $status; reports in $REPORT"
exit "$status"
