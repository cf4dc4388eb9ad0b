// Reading files with errors as Status (missing file, directory, unreadable, too large).
#pragma once

#include <cstdint>
#include <string>

#include "support/status.h"

namespace kiln {

// Reads a whole file. Files larger than `max_bytes` are an error, so untrusted paths cannot make
// Kiln allocate without bound.
Expected<std::string> read_file(const std::string& path, int64_t max_bytes = int64_t{1} << 30);

}  // namespace kiln
