#!/usr/bin/env bash
# The `asan` preset (AddressSanitizer + UndefinedBehaviorSanitizer, CPU only) on the parsers and the
# hardening tests: builds those test binaries in build/asan and runs them (the fuzz tests with their CI
# budget). The whole CPU suite under ASan does not fit CI's 90 minutes on 2 cores beside the release
# build (docs/hardening.md); CNNERGY_ASAN_ALL=1 builds and runs everything instead.
set -euo pipefail
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=${CNNERGY_JOBS:-$(nproc)}
cd "$repo_root"
cmake --preset asan >/dev/null
targets=(test_fuzz test_fuzz_checkpoint test_hardening test_data test_core test_tune test_telemetry_units)
labels='fuzz|hardening|data|core|tune|telemetry'
if [ "${CNNERGY_ASAN_ALL:-0}" = 1 ]; then
  cmake --build build/asan -j "$jobs"
  ctest --preset asan -j "$jobs" -LE 'gpu|bench' --timeout 1800 "$@"
else
  cmake --build build/asan -j "$jobs" --target "${targets[@]}"
  ctest --preset asan -j "$jobs" -L "$labels" --timeout 1800 "$@"
fi
