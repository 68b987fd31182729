// WriteFileAtomically: a file that appears under its name whole or not at all. The bytes go to a
// temporary file beside it (same directory, so the rename cannot cross file systems), which is
// fsynced, renamed over the name and followed by an fsync of the directory (so the rename itself
// survives a power cut). On any error the temporary file is removed and the old file, if any, is
// untouched.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/util/status.h"

namespace streamd {

Status WriteFileAtomically(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace streamd
