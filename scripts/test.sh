#!/usr/bin/env bash
# Set up (packages, configure, build) and run every test through CTest. GPU tests skip cleanly on a
# machine without a GPU. Extra arguments go to ctest (e.g. -L core, -R Conv).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$build_dir"
ctest --output-on-failure -j "$jobs" --timeout 1200 "$@"
