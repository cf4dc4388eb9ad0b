// Files with errors as Status: reading (missing file, directory, unreadable, too large),
// writing atomically, and the folder Kiln caches things in.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln {

// Reads a whole file. Files larger than `max_bytes` are an error, so untrusted paths cannot make
// Kiln allocate without bound.
Expected<std::string> read_file(const std::string& path, int64_t max_bytes = int64_t{1} << 30);

// Writes `contents` under a name unique to this process and call in the same folder (created
// if missing), then renames it to `path`: readers see the old file or the whole new one.
Status write_file_atomically(const std::filesystem::path& path, std::string_view contents);

// Where Kiln keeps caches (compiled kernels, device profiles): $KILN_CACHE_DIR, else
// $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln. Empty variables count as unset.
std::filesystem::path kiln_cache_root();

}  // namespace kiln
