// The process's resident memory, read from /proc/self/statm when asked (Linux only).
#pragma once

namespace streamd::metrics {

// Resident set size in bytes: the second field of /proc/self/statm (pages) times the page
// size. NaN when the file cannot be read or parsed (exposed as NaN: "unknown", never a fake 0).
double ResidentMemoryBytes();

}  // namespace streamd::metrics
