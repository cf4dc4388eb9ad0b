#include "support/files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

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

}  // namespace kiln
