#!/usr/bin/env bash
# Set up (packages, configure, build) and run the main job. Arguments after the script name are
# passed to the main job's command. See README.md for what the main job does.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$repo_root/scripts/main_job.sh" "$build_dir" "$@"
