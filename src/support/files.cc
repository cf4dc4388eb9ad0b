#include "support/files.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace kiln {

Expected<std::string> read_file(const std::string& path, int64_t max_bytes) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return Status::errorf("{}: no such file", path);
  }
  if (std::filesystem::is_directory(status)) return Status::errorf("{}: is a directory", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::errorf("{}: cannot open: {}", path, std::strerror(errno));
  std::string contents;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    contents.append(buffer, static_cast<size_t>(in.gcount()));
    if (static_cast<int64_t>(contents.size()) > max_bytes) {
      return Status::errorf("{}: larger than the limit of {} bytes", path, max_bytes);
    }
  }
  if (in.bad()) return Status::errorf("{}: read error", path);
  return contents;
}

Status write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return Status::errorf("{}: cannot create the folder: {}", path.string(), ec.message());
  std::filesystem::path temporary = path;
  temporary += fmt::format(".tmp-{}-{}", getpid(), counter++);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!out.flush()) {
      std::filesystem::remove(temporary, ec);
      return Status::errorf("{}: cannot write", temporary.string());
    }
  }
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    return Status::errorf("{}: cannot rename into place: {}", path.string(), ec.message());
  }
  return Status::ok();
}

int prune_least_recently_used(const std::filesystem::path& folder, int64_t max_bytes) {
  struct Entry {
    std::filesystem::file_time_type used;
    std::filesystem::path path;
    int64_t bytes;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& file : std::filesystem::directory_iterator(folder, ec)) {
    std::error_code file_ec;
    if (!file.is_regular_file(file_ec) ||
        file.path().filename().string().find(".tmp-") != std::string::npos) {
      continue;
    }
    const auto bytes = static_cast<int64_t>(file.file_size(file_ec));
    const std::filesystem::file_time_type used = file.last_write_time(file_ec);
    if (file_ec) continue;
    entries.push_back({used, file.path(), bytes});
    total += bytes;
  }
  if (ec || total <= max_bytes) return 0;
  std::ranges::sort(entries, {}, &Entry::used);
  int removed = 0;
  for (const Entry& entry : entries) {
    if (total <= max_bytes / 4 * 3) break;
    std::error_code remove_ec;
    if (std::filesystem::remove(entry.path, remove_ec)) ++removed;
    if (!remove_ec) total -= entry.bytes;
  }
  return removed;
}

void touch(const std::filesystem::path& path) {
  std::error_code ignored;
  std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now(), ignored);
}

std::filesystem::path kiln_cache_root() {
  const auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? std::filesystem::path(value)
                                              : std::filesystem::path();
  };
  if (std::filesystem::path root = env("KILN_CACHE_DIR"); !root.empty()) return root;
  if (std::filesystem::path xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return xdg / "kiln";
  return env("HOME") / ".cache" / "kiln";
}

void append_part(std::string& entry, std::string_view part) {
  entry += fmt::format("{}\n", part.size());
  entry.append(part);
}

std::optional<std::string_view> next_part(std::string_view& rest) {
  const size_t newline = rest.find('\n');
  if (newline == std::string_view::npos) return std::nullopt;
  size_t size = 0;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + newline, size);
  if (error != std::errc() || end != rest.data() + newline || size > rest.size() - newline - 1) {
    return std::nullopt;
  }
  std::string_view part = rest.substr(newline + 1, size);
  rest.remove_prefix(newline + 1 + size);
  return part;
}

}  // namespace kiln
