// Files that appear whole or not at all, and the statuses of failed file system calls. Shared by
// every durable writer (snapshots, build plans).
//
// WriteFileAtomically: the bytes go to a hidden temporary file beside the target (same directory,
// so the rename cannot cross file systems; named ".<name>.<pid>.<random>.tmp" and created
// exclusively, so concurrent writers never share one), which is fsynced, renamed over the name
// and followed by an fsync of the directory (so the rename itself survives a power cut). On any
// error the temporary file is removed and the old file, if any, is untouched. A reader that
// finds ".*.tmp" files left by a crashed writer may remove them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>

#include "engine/util/status.h"

namespace streamd {

Status WriteFileAtomically(const std::string& path, std::span<const uint8_t> bytes,
                           mode_t mode = 0644);

// fsync of a directory (after a rename or unlink in it). File systems that cannot fsync a
// directory (EINVAL) make the change as durable as they make it: not an error.
Status SyncDirectory(const std::string& dir);

// "<what> <path>: <strerror>" with a code per cause: a full disk, quota or file-size limit
// (ENOSPC, EDQUOT, EFBIG) RESOURCE_EXHAUSTED; a read-only or forbidden place (EROFS, EACCES,
// EPERM) PERMISSION_DENIED; ENOENT NOT_FOUND; anything else INTERNAL.
Status ErrnoStatus(int err, const std::string& what, const std::string& path);

}  // namespace streamd
