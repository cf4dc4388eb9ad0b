// Files with errors as Status: reading (missing file, directory, unreadable, too large),
// writing atomically, and the folder Kiln caches things in.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
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

// Keeps the regular files directly in `folder` within `max_bytes` of contents: when they hold
// more, the least recently used (the oldest modification times: readers of a cache `touch`
// what they use) are removed until they hold at most three quarters of it, so that pruning is
// rare. Files being written (write_file_atomically's temporaries) are left alone, and a file
// that another process removed or cannot be removed is skipped. Returns how many it removed.
int prune_least_recently_used(const std::filesystem::path& folder, int64_t max_bytes);

// Marks `path` as used now (its modification time), for prune_least_recently_used; a file
// that cannot be touched is left as it is.
void touch(const std::filesystem::path& path);

// A cache entry's parts: each as "<size>\n<bytes>", so that any bytes may follow one another.
// append_part adds one to `entry`; next_part takes the next from the front of `rest`, nullopt
// when none is left or what is left is damaged.
void append_part(std::string& entry, std::string_view part);
std::optional<std::string_view> next_part(std::string_view& rest);

// Where Kiln keeps caches (compiled kernels, device profiles): $KILN_CACHE_DIR, else
// $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln. Empty variables count as unset.
std::filesystem::path kiln_cache_root();

}  // namespace kiln
