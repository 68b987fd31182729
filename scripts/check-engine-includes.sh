#!/usr/bin/env bash
# The boundary between the transports and the engine, checked (docs/ARCHITECTURE.md, "Layout and
# dependencies"): server/ (all of it: config/, metrics/, http/) and tools/streamctl drive the
# engine through its facade only:
#   engine/api/session_api.h   plain values and the api::Engine / api::Session interfaces
#   engine/api/engine_host.h   the engine as the daemon hosts it (api::EngineHost: the model
#                              loaded, the session parts built, plain hooks and stats for metrics)
#   engine/util/status.h       Status, StatusOr
# and a few plain utilities that hold no engine state:
#   engine/util/task_runner.h  a thread and its queue (the gRPC service's blocking snapshot
#                              transfers run on one)
#   engine/util/session_id.h   the session id value type (streamctl checks an id before it
#                              sends it)
#   engine/util/hex.h          hex digits (config/api_keys_file.cc reads key hashes)
#   engine/util/version.h      the version string (serve_command.cc prints and stamps it)
# Anything else (caches, pools, backends, kernels, plans, snapshots, the model, the registry) is
# the engine's inside: a transport that needs it needs a new call on the facade instead. Tests are
# exempt (they build engines to drive). Exits non-zero listing every offending line.
set -euo pipefail
cd "$(dirname "$0")/.."
allowed='^engine/(api/(session_api|engine_host)\.h|util/(status|task_runner|session_id|hex|version)\.h)$'
bad=0
while IFS= read -r file; do
  case "$file" in
    *_test.cc | *_test.h | *test_util.h) continue ;;
  esac
  while IFS=: read -r line include; do
    path=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$include")
    [[ "$path" == engine/* ]] || continue
    [[ "$path" =~ $allowed ]] && continue
    echo "$file:$line: includes $path, inside the engine (allowed: engine/api/{session_api,engine_host}.h, engine/util/{status,task_runner,session_id,hex,version}.h; see this script)" >&2
    bad=1
  done < <(grep -n '#include "engine/' "$file" || true)
done < <(git ls-files server tools/streamctl | grep -E '\.(cc|h)$')
if [[ $bad -ne 0 ]]; then exit 1; fi
echo "check-engine-includes: server/ and tools/streamctl drive the engine through its facade"
