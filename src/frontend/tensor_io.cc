#include "frontend/tensor_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zip.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <utility>

#include "frontend/onnx_tensor.h"
#include "frontend/packed_elements.h"
#include "support/check.h"
#include "support/files.h"

namespace kiln {
namespace {

// ---------------------------------------------------------------------------------------------
// .npy

constexpr std::string_view kNpyMagic = "\x93NUMPY";
// NumPy pads headers so that the data starts at a multiple of this many bytes.
constexpr int64_t kNpyAlignment = 64;
// NumPy leaves room in the header for the first dimension to grow to this many digits.
constexpr int64_t kNpyGrowthAxisDigits = 21;

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// Parses the header of a .npy file: the repr of a Python dict with exactly the keys 'descr',
// 'fortran_order' and 'shape', e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (2,
// 3), }" followed by spaces and a newline.
class NpyHeaderParser {
 public:
  explicit NpyHeaderParser(std::string_view text) : text_(text) {}

  Expected<NpyHeader> parse() {
    NpyHeader header;
    bool has_descr = false;
    bool has_fortran_order = false;
    bool has_shape = false;
    if (!consume('{')) return error("expected '{'");
    while (!consume('}')) {
      KILN_ASSIGN_OR_RETURN(std::string key, string_literal());
      if (!consume(':')) return error("expected ':'");
      if (key == "descr") {
        if (has_descr) return error("duplicate key 'descr'");
        if (consume('[')) return Status::error("structured dtypes are unsupported");
        KILN_ASSIGN_OR_RETURN(header.descr, string_literal());
        has_descr = true;
      } else if (key == "fortran_order") {
        if (has_fortran_order) return error("duplicate key 'fortran_order'");
        KILN_ASSIGN_OR_RETURN(header.fortran_order, bool_literal());
        has_fortran_order = true;
      } else if (key == "shape") {
        if (has_shape) return error("duplicate key 'shape'");
        KILN_ASSIGN_OR_RETURN(header.shape, int_tuple());
        has_shape = true;
      } else {
        return Status::errorf("header has an unexpected key '{}'", key);
      }
      if (!consume(',')) {
        if (!consume('}')) return error("expected ',' or '}'");
        break;
      }
    }
    skip_spaces();
    if (pos_ != text_.size()) return error("unexpected text after the header's '}'");
    if (!has_descr) return Status::error("header lacks the key 'descr'");
    if (!has_fortran_order) return Status::error("header lacks the key 'fortran_order'");
    if (!has_shape) return Status::error("header lacks the key 'shape'");
    return header;
  }

 private:
  void skip_spaces() {
    while (pos_ < text_.size() && std::strchr(" \t\r\n", text_[pos_]) != nullptr) ++pos_;
  }

  // Skips spaces, then consumes `c` if it comes next.
  bool consume(char c) {
    skip_spaces();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool consume_word(std::string_view word) {
    skip_spaces();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Expected<std::string> string_literal() {
    skip_spaces();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return error("expected a quoted string");
    }
    const char quote = text_[pos_];
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) return error("unterminated string");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    if (value.find('\\') != std::string::npos) return error("escapes in strings are unsupported");
    pos_ = end + 1;
    return value;
  }

  Expected<bool> bool_literal() {
    if (consume_word("True")) return true;
    if (consume_word("False")) return false;
    return error("expected True or False");
  }

  // "()", "(5,)", "(2, 3)" or "(2, 3,)".
  Expected<std::vector<int64_t>> int_tuple() {
    if (!consume('(')) return error("expected a tuple");
    std::vector<int64_t> values;
    bool trailing_comma = false;
    while (!consume(')')) {
      skip_spaces();
      int64_t value = 0;
      const char* begin = text_.data() + pos_;
      const char* end = text_.data() + text_.size();
      const auto [next, errc] = std::from_chars(begin, end, value);
      if (errc == std::errc::result_out_of_range) return error("dimension out of range");
      if (errc != std::errc()) return error("expected an integer");
      pos_ += static_cast<size_t>(next - begin);
      values.push_back(value);
      trailing_comma = consume(',');
      if (!trailing_comma) {
        if (!consume(')')) return error("expected ',' or ')'");
        break;
      }
    }
    if (values.size() == 1 && !trailing_comma) return error("shape is not a tuple");
    return values;
  }

  Status error(std::string_view what) const {
    return Status::errorf("malformed header: {} at offset {}", what, pos_);
  }

  std::string_view text_;
  size_t pos_ = 0;
};

struct NpyElementType {
  PackedType type;
  ByteOrder order;
};

// '<f4' -> (f32, little). '|' (no byte order) is accepted for one-byte types only.
Expected<NpyElementType> parse_npy_descr(std::string_view descr) {
  static constexpr std::pair<std::string_view, PackedType> kTypes[] = {
      {"f2", PackedType::f16}, {"f4", PackedType::f32}, {"f8", PackedType::f64},
      {"i1", PackedType::i8},  {"i2", PackedType::i16}, {"i4", PackedType::i32},
      {"i8", PackedType::i64}, {"u1", PackedType::u8},  {"u2", PackedType::u16},
      {"u4", PackedType::u32}, {"u8", PackedType::u64}, {"b1", PackedType::boolean}};
  const auto unsupported = [&] {
    return Status::errorf(
        "unsupported dtype '{}' (Kiln reads <f2 <f4 <f8 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1, "
        "little- or big-endian)",
        descr);
  };
  if (descr.size() != 3) return unsupported();
  const char order = descr[0];
  for (const auto& [name, type] : kTypes) {
    if (descr.substr(1) != name) continue;
    if (order == '<' || (order == '|' && packed_size_bytes(type) == 1)) {
      return NpyElementType{type, ByteOrder::little};
    }
    if (order == '>') return NpyElementType{type, ByteOrder::big};
    return unsupported();
  }
  return unsupported();
}

std::string_view npy_descr(DType dtype) {
  switch (dtype) {
    case DType::f16: return "<f2";
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::boolean: return "|b1";
    case DType::bf16: break;  // written as f32 by the caller
  }
  KILN_UNREACHABLE("no .npy dtype for {}", dtype_name(dtype));
}

// Python's repr of a shape tuple: "()", "(5,)", "(2, 3)".
std::string python_tuple(const std::vector<int64_t>& dims) {
  if (dims.size() == 1) return fmt::format("({},)", dims[0]);
  return fmt::format("({})", fmt::join(dims, ", "));
}

uint64_t load_little_endian(std::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;) {
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return value;
}

// Reorders the elements of a column-major array of `shape` into row-major order.
std::vector<double> fortran_to_row_major(const std::vector<double>& column_major,
                                         const Shape& shape) {
  const int rank = shape.rank();
  // Walking the reversed shape in row-major order visits the elements in column-major order.
  const Shape reversed(std::vector<int64_t>(shape.dims().rbegin(), shape.dims().rend()));
  std::vector<double> row_major(column_major.size());
  std::vector<int64_t> index(static_cast<size_t>(rank));
  size_t source = 0;
  for_each_index(reversed, [&](std::span<const int64_t> reversed_index) {
    for (int i = 0; i < rank; ++i) {
      index[static_cast<size_t>(i)] = reversed_index[static_cast<size_t>(rank - 1 - i)];
    }
    row_major[static_cast<size_t>(linear_offset(shape, index))] = column_major[source++];
  });
  return row_major;
}

Expected<Array> parse_npy_contents(std::string_view bytes) {
  if (bytes.substr(0, kNpyMagic.size()) != kNpyMagic) {
    return Status::error("not a .npy file (bad magic string)");
  }
  if (bytes.size() < 8) return Status::error("truncated .npy header");
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (minor != 0 || major < 1 || major > 3) {
    return Status::errorf("unsupported .npy format version {}.{}", major, minor);
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + length_bytes) return Status::error("truncated .npy header");
  const uint64_t header_length = load_little_endian(bytes.substr(8, length_bytes));
  const size_t header_start = 8 + length_bytes;
  if (header_length > bytes.size() - header_start) {
    return Status::errorf("truncated .npy header: it claims {} bytes, but only {} follow",
                          header_length, bytes.size() - header_start);
  }
  KILN_ASSIGN_OR_RETURN(
      NpyHeader header,
      NpyHeaderParser(bytes.substr(header_start, static_cast<size_t>(header_length))).parse());
  KILN_ASSIGN_OR_RETURN(NpyElementType element, parse_npy_descr(header.descr));
  KILN_ASSIGN_OR_RETURN(Shape shape, Shape::make(header.shape));

  const std::string_view data = bytes.substr(header_start + static_cast<size_t>(header_length));
  const int64_t needed = shape.num_elements() * packed_size_bytes(element.type);
  if (static_cast<int64_t>(data.size()) != needed) {
    return Status::errorf("shape {} of '{}' needs {} bytes of data, but {} bytes follow the header",
                          shape.to_string(), header.descr, needed, data.size());
  }
  KILN_ASSIGN_OR_RETURN(std::vector<double> values,
                        unpack_elements(data, element.type, element.order));
  if (header.fortran_order && shape.rank() > 1) values = fortran_to_row_major(values, shape);
  return Array(dtype_read_as(element.type), std::move(shape), std::move(values));
}

// ---------------------------------------------------------------------------------------------
// Files

Status write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::errorf("{}: cannot open for writing: {}", path, std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return Status::errorf("{}: write error", path);
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------
// .npz

constexpr std::string_view kNpySuffix = ".npy";
// A zip archive with no members: just the end-of-central-directory record. (libzip writes no
// file at all for an empty archive.)
constexpr std::string_view kEmptyZip{"PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 22};
// The modification time given to written members (2000-01-01), so that equal contents give
// equal files.
constexpr time_t kNpzMemberTime = 946684800;

struct ZipDiscarder {
  void operator()(zip_t* archive) const { zip_discard(archive); }
};
struct ZipFileCloser {
  void operator()(zip_file_t* file) const { zip_fclose(file); }
};
using ZipArchive = std::unique_ptr<zip_t, ZipDiscarder>;
using ZipMember = std::unique_ptr<zip_file_t, ZipFileCloser>;

std::string zip_error_message(zip_error_t* error) {
  std::string message = zip_error_strerror(error);
  zip_error_fini(error);
  return message;
}

std::string zip_error_code_message(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  return zip_error_message(&error);
}

Expected<std::string> read_zip_member(zip_t* archive, zip_uint64_t index) {
  ZipMember file(zip_fopen_index(archive, index, 0));
  if (!file) return Status::errorf("cannot open: {}", zip_strerror(archive));
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    const zip_int64_t count = zip_fread(file.get(), buffer, sizeof(buffer));
    if (count < 0) return Status::errorf("cannot read: {}", zip_file_strerror(file.get()));
    if (count == 0) return contents;
    contents.append(buffer, static_cast<size_t>(count));
    if (static_cast<int64_t>(contents.size()) > kMaxTensorFileBytes) {
      return Status::errorf("larger than the limit of {} bytes", kMaxTensorFileBytes);
    }
  }
}

Expected<std::vector<NamedArray>> parse_npz_contents(std::string_view bytes) {
  // libzip opens empty input as an empty archive; an empty archive is a 22-byte record.
  if (bytes.empty()) return Status::error("not a valid zip archive: the file is empty");
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* zip_source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (zip_source == nullptr) return Status::error(zip_error_message(&error));
  ZipArchive archive(zip_open_from_source(zip_source, ZIP_RDONLY | ZIP_CHECKCONS, &error));
  if (!archive) {
    zip_source_free(zip_source);
    return Status::errorf("not a valid zip archive: {}", zip_error_message(&error));
  }
  zip_error_fini(&error);

  std::vector<NamedArray> entries;
  std::set<std::string, std::less<>> names;
  const zip_int64_t count = zip_get_num_entries(archive.get(), 0);
  for (zip_int64_t i = 0; i < count; ++i) {
    const auto index = static_cast<zip_uint64_t>(i);
    zip_stat_t stat;
    zip_stat_init(&stat);
    if (zip_stat_index(archive.get(), index, 0, &stat) != 0 || !(stat.valid & ZIP_STAT_NAME)) {
      return Status::errorf("member {}: {}", i, zip_strerror(archive.get()));
    }
    const std::string_view member = stat.name;
    if (!member.ends_with(kNpySuffix) || member.size() == kNpySuffix.size()) {
      return Status::errorf("member '{}' is not a .npy file", member);
    }
    std::string name(member.substr(0, member.size() - kNpySuffix.size()));
    if (!names.insert(name).second) return Status::errorf("duplicate member '{}'", member);
    if ((stat.valid & ZIP_STAT_SIZE) &&
        stat.size > static_cast<zip_uint64_t>(kMaxTensorFileBytes)) {
      return Status::errorf("member '{}' is larger than the limit of {} bytes", member,
                            kMaxTensorFileBytes);
    }
    auto contents = read_zip_member(archive.get(), index);
    if (!contents) return contents.status().with_context(fmt::format("member '{}'", member));
    KILN_ASSIGN_OR_RETURN(Array array, parse_npy(*contents, fmt::format("member '{}'", member)));
    entries.push_back({std::move(name), std::move(array)});
  }
  return entries;
}

}  // namespace

Expected<Array> parse_npy(std::string_view bytes, std::string_view source) {
  auto array = parse_npy_contents(bytes);
  if (!array) return array.status().with_context(source);
  return array;
}

std::string serialize_npy(const Array& array) {
  // NumPy has no bfloat16; f32 holds every bf16 value exactly.
  const DType file_dtype = array.dtype == DType::bf16 ? DType::f32 : array.dtype;
  const std::vector<int64_t>& dims = array.shape.dims();
  // Byte for byte what np.save writes (numpy/lib/format.py): keys sorted, room for the first
  // dimension to grow, padding to the alignment, a final newline.
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   npy_descr(file_dtype), python_tuple(dims));
  if (!dims.empty()) {
    header.append(static_cast<size_t>(kNpyGrowthAxisDigits) - std::to_string(dims[0]).size(), ' ');
  }
  const auto padded_length = [&](int64_t prefix_length) {
    const int64_t length = static_cast<int64_t>(header.size()) + 1;  // the final newline
    return length + kNpyAlignment - (prefix_length + length) % kNpyAlignment;
  };
  const bool fits_version1 = padded_length(10) <= UINT16_MAX;
  const int64_t header_length = padded_length(fits_version1 ? 10 : 12);

  std::string out(kNpyMagic);
  out.push_back(static_cast<char>(fits_version1 ? 1 : 2));
  out.push_back('\0');
  for (int i = 0; i < (fits_version1 ? 2 : 4); ++i) {
    out.push_back(static_cast<char>((header_length >> (8 * i)) & 0xFF));
  }
  out += header;
  out.append(static_cast<size_t>(header_length) - header.size() - 1, ' ');
  out.push_back('\n');
  pack_elements(array.data, file_dtype, out);
  return out;
}

Expected<Array> read_npy(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path, kMaxTensorFileBytes));
  return parse_npy(bytes, path);
}

Status write_npy(const std::string& path, const Array& array) {
  return write_bytes(path, serialize_npy(array));
}

Expected<std::vector<NamedArray>> parse_npz(std::string_view bytes, std::string_view source) {
  auto entries = parse_npz_contents(bytes);
  if (!entries) return entries.status().with_context(source);
  return entries;
}

Expected<std::vector<NamedArray>> read_npz(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path, kMaxTensorFileBytes));
  return parse_npz(bytes, path);
}

Status write_npz(const std::string& path, const std::vector<NamedArray>& entries) {
  std::set<std::string, std::less<>> names;
  for (const NamedArray& entry : entries) {
    if (entry.name.empty()) return Status::errorf("{}: an entry has an empty name", path);
    if (!names.insert(entry.name).second) {
      return Status::errorf("{}: duplicate entry name '{}'", path, entry.name);
    }
  }
  if (entries.empty()) return write_bytes(path, kEmptyZip);

  int error_code = 0;
  ZipArchive archive(zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error_code));
  if (!archive) {
    return Status::errorf("{}: cannot create: {}", path, zip_error_code_message(error_code));
  }
  // libzip reads the members' bytes only when the archive is closed.
  std::vector<std::string> members;
  members.reserve(entries.size());
  for (const NamedArray& entry : entries) {
    const std::string& bytes = members.emplace_back(serialize_npy(entry.array));
    zip_source_t* source = zip_source_buffer(archive.get(), bytes.data(), bytes.size(), 0);
    const std::string member = entry.name + std::string(kNpySuffix);
    const zip_int64_t index =
        source == nullptr ? -1
                          : zip_file_add(archive.get(), member.c_str(), source, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      if (source != nullptr) zip_source_free(source);
      return Status::errorf("{}: cannot add '{}': {}", path, member, zip_strerror(archive.get()));
    }
    const auto member_index = static_cast<zip_uint64_t>(index);
    if (zip_set_file_compression(archive.get(), member_index, ZIP_CM_STORE, 0) != 0 ||
        zip_file_set_mtime(archive.get(), member_index, kNpzMemberTime, 0) != 0) {
      return Status::errorf("{}: cannot add '{}': {}", path, member, zip_strerror(archive.get()));
    }
  }
  if (zip_close(archive.get()) != 0) {
    return Status::errorf("{}: cannot write: {}", path, zip_strerror(archive.get()));
  }
  archive.release();  // zip_close freed it
  return Status::ok();
}

Expected<NamedArray> read_tensor_proto_file(const std::string& path) {
  // Protobuf parses at most 2 GiB.
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path, INT_MAX));
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes)) {
    return Status::errorf("{}: not a valid ONNX TensorProto", path);
  }
  std::string base_dir = std::filesystem::path(path).parent_path().string();
  if (base_dir.empty()) base_dir = ".";
  auto array = array_from_tensor_proto(proto, base_dir);
  if (!array) return array.status().with_context(path);
  return NamedArray{proto.name(), std::move(*array)};
}

Status write_tensor_proto_file(const std::string& path, const std::string& name,
                               const Array& array) {
  std::string bytes;
  if (!tensor_proto_from_array(name, array).SerializeToString(&bytes)) {
    return Status::errorf("{}: tensor '{}' is too large for a TensorProto", path, name);
  }
  return write_bytes(path, bytes);
}

}  // namespace kiln
