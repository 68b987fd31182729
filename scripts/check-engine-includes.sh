#!/usr/bin/env bash
# The boundary between the transports and the engine, checked: server/ and tools/streamctl may
# include from engine/ only what the transports are meant to drive (docs/ARCHITECTURE.md,
# "Layout and dependencies"):
#   engine/api/        the engine as the daemon loads it (LoadEngine) and its value types
#   engine/sessions/   a session's life: registry, driver, admission, quotas, transfer
#   engine/util/       status.h, session_id.h, version.h, hex.h, task_runner.h (plain utilities)
# Anything else (caches, pools, backends, kernels, plans, snapshots, the model, the scheduler's
# own folder) is the engine's inside: a transport that needs it needs a new engine call instead.
# Tests are exempt (they build engines to drive). Exits non-zero listing every offending line.
set -euo pipefail
cd "$(dirname "$0")/.."
allowed='^engine/(api/[a-z_]+\.h|sessions/[a-z_]+\.h|util/(status|session_id|version|hex|task_runner)\.h)$'
bad=0
while IFS= read -r file; do
  case "$file" in
    *_test.cc | *_test.h | *test_util.h) continue ;;
  esac
  while IFS=: read -r line include; do
    path=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$include")
    [[ "$path" == engine/* ]] || continue
    if ! [[ "$path" =~ $allowed ]]; then
      echo "$file:$line: includes $path, inside the engine (allowed: engine/api/, engine/sessions/, engine/util/{status,session_id,version,hex,task_runner}.h)" >&2
      bad=1
    fi
  done < <(grep -n '#include "engine/' "$file" || true)
done < <(git ls-files server tools/streamctl | grep -E '\.(cc|h)$')
if [[ $bad -ne 0 ]]; then exit 1; fi
echo "check-engine-includes: server/ and tools/streamctl stay outside the engine's inside"
