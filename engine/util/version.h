// The streamd version: stamped into snapshots and build plans, reported by the metrics'
// build info. A plan or snapshot from another version is refused or migrated by its reader.
#pragma once

namespace streamd {

inline constexpr const char* kStreamdVersion = "0.2.1";

}  // namespace streamd
