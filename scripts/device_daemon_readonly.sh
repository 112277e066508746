#!/usr/bin/env bash
# Read-only check of the cnnergyd client path on a real (lent) GPU, run as root there:
#   scripts/device_daemon_readonly.sh [BIN_DIR]   (default build/release/bin, else cnnergyd on PATH)
# Starts cnnergyd with a READ-ONLY policy (read_only: true, no GPU listed, zero changes per minute)
# on a socket in a temp folder, then sends ONLY state queries: `cnnergy daemon-state` as root and,
# where setpriv can, as uid 65534 inside and outside the socket's group. It records each GPU's power
# limit and application clocks with nvidia-smi before and after and fails if anything differs.
# It never sends a change request, and the daemon's policy would refuse one anyway.
set -euo pipefail

BIN=${1:-build/release/bin}
# On a lent machine set up by scripts/device_env.sh the binaries may be on PATH instead.
if [[ ! -x $BIN/cnnergyd ]] && command -v cnnergyd >/dev/null; then BIN=$(dirname "$(command -v cnnergyd)"); fi
CNNERGY=$(readlink -f "$BIN/cnnergy")
CNNERGYD=$(readlink -f "$BIN/cnnergyd")
[[ $(id -u) -eq 0 ]] || { echo "run as root (the daemon must run as root)" >&2; exit 2; }
[[ -x $CNNERGY && -x $CNNERGYD ]] || { echo "no cnnergy/cnnergyd in $BIN: build them first" >&2; exit 2; }
echo "NVML: ${CNNERGY_NVML_LIBRARY:-libnvidia-ml.so.1 of the driver}"

TMP=$(mktemp -d /tmp/cnnergyd-readonly-XXXXXX)
chmod 0755 "$TMP"
GID=4242  # the socket's group for the unprivileged check; no account needs it
cat > "$TMP/policy.json" <<JSON
{"version": 1, "comment": "read-only check: every change refused",
 "socket_path": "$TMP/cnnergyd.sock", "socket_group": "$GID", "state_dir": "$TMP/state",
 "read_only": true, "gpus": [], "max_changes_per_minute": 0}
JSON

settings() {
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,uuid,power.limit,clocks.applications.graphics,clocks.applications.memory \
      --format=csv,noheader
  else
    "$CNNERGY" devices 2>/dev/null | grep -Ei "limit|clock" || true
  fi
}

DPID=""
cleanup() {
  [[ -n $DPID ]] && kill -TERM "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

settings > "$TMP/before.txt"
"$CNNERGYD" --check --policy "$TMP/policy.json"
"$CNNERGYD" --policy "$TMP/policy.json" 2> "$TMP/daemon.log" &
DPID=$!
for _ in $(seq 100); do [[ -S $TMP/cnnergyd.sock ]] && break; sleep 0.1; done
[[ -S $TMP/cnnergyd.sock ]] || { cat "$TMP/daemon.log"; echo "FAIL: the daemon did not start" >&2; exit 1; }

fail=0
echo "== state through the daemon, as root"
"$CNNERGY" daemon-state --socket "$TMP/cnnergyd.sock" || fail=1
"$CNNERGY" daemon-state --socket "$TMP/cnnergyd.sock" --format json > "$TMP/state.json" || fail=1
grep -q '"may_change": false' "$TMP/state.json" || { echo "FAIL: the daemon did not report read-only"; fail=1; }

if command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups "$CNNERGY" --help >/dev/null 2>&1; then
  echo "== as uid 65534 in group $GID (expected: the state)"
  setpriv --reuid=65534 --regid=65534 --groups=$GID "$CNNERGY" daemon-state --socket "$TMP/cnnergyd.sock" || fail=1
  echo "== as uid 65534 outside the group (expected: refused, exit 6)"
  set +e
  setpriv --reuid=65534 --regid=65534 --clear-groups "$CNNERGY" daemon-state --socket "$TMP/cnnergyd.sock"
  rc=$?
  set -e
  [[ $rc -eq 6 ]] || { echo "FAIL: a user outside the group got exit $rc"; fail=1; }
else
  echo "(setpriv cannot run $CNNERGY as uid 65534 here: the unprivileged part is skipped)"
fi

kill -TERM "$DPID"; wait "$DPID" || true; DPID=""
echo "== daemon log"; cat "$TMP/daemon.log"
settings > "$TMP/after.txt"
if ! diff -u "$TMP/before.txt" "$TMP/after.txt"; then echo "FAIL: a GPU setting differs"; fail=1; fi
ls "$TMP/state" | grep -q '^lease-' && { echo "FAIL: a lease journal was written"; fail=1; }
echo "settings (unchanged):"; cat "$TMP/after.txt"
[[ $fail -eq 0 ]] && echo "PASS: state queries through cnnergyd work; no GPU setting changed" || exit 1
