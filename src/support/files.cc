#include "support/files.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

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

}  // namespace kiln
