// The byte format the runtime's data is stored in (runtime/program.h: serialize_program,
// runtime/cuda_launch.h: serialize_launches): 64-bit little-endian integers and
// length-prefixed texts. ByteReader reads them back checking every integer against its range
// and every count against the bytes left, so damaged bytes are an error naming what was being
// read, never a value out of range. Internal to src/runtime.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "support/status.h"

namespace kiln::runtime {

// The largest byte size or offset a reader accepts.
inline constexpr int64_t kMaxSerializedBytes = int64_t{1} << 50;

class ByteWriter {
 public:
  template <typename T>
  void integer(T value) {
    static_assert(std::is_integral_v<T> || std::is_enum_v<T>);
    auto bits = static_cast<uint64_t>(static_cast<int64_t>(value));
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }
  void text(std::string_view text) {
    integer(text.size());
    bytes_.append(text);
  }
  // What the bytes hold and the version of their format, for ByteReader::header.
  void header(std::string_view tag, int64_t format) {
    text(tag);
    integer(format);
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class ByteReader {
 public:
  // `subject` names the bytes in errors: "program bytes".
  ByteReader(std::string_view bytes, std::string_view subject) : bytes_(bytes), subject_(subject) {}

  Expected<int64_t> integer(int64_t lo, int64_t hi, std::string_view what) {
    if (bytes_.size() - position_ < 8) return Status::errorf("{} end in {}", subject_, what);
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) {
      bits |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[position_ + i])) << (8 * i);
    }
    position_ += 8;
    const auto value = static_cast<int64_t>(bits);
    if (value < lo || value > hi) {
      return Status::errorf("{}: {} = {} is outside [{}, {}]", subject_, what, value, lo, hi);
    }
    return value;
  }
  Expected<bool> flag(std::string_view what) {
    KILN_ASSIGN_OR_RETURN(int64_t value, integer(0, 1, what));
    return value == 1;
  }
  // A count of items of at least `item_bytes` bytes each, checked against the bytes left.
  Expected<size_t> count(int64_t item_bytes, std::string_view what) {
    const auto left = static_cast<int64_t>(bytes_.size() - position_);
    KILN_ASSIGN_OR_RETURN(int64_t n, integer(0, left / std::max<int64_t>(item_bytes, 1), what));
    return static_cast<size_t>(n);
  }
  Expected<std::string_view> text(std::string_view what) {
    KILN_ASSIGN_OR_RETURN(size_t size, count(1, what));
    std::string_view text = bytes_.substr(position_, size);
    position_ += size;
    return text;
  }
  // Checks ByteWriter::header's tag and format; `what` names the data in errors.
  Status header(std::string_view tag, int64_t format, std::string_view what) {
    Expected<std::string_view> read = text("the tag");
    if (!read || *read != tag) return Status::errorf("not {}", what);
    KILN_ASSIGN_OR_RETURN(int64_t version, integer(0, 1 << 30, "the format"));
    if (version != format) {
      return Status::errorf("{} in format {}, this Kiln reads {}", what, version, format);
    }
    return Status::ok();
  }
  bool at_end() const { return position_ == bytes_.size(); }

 private:
  std::string_view bytes_;
  std::string_view subject_;
  size_t position_ = 0;
};

}  // namespace kiln::runtime
