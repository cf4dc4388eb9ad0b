// Tensor files (frontend/tensor_io.h): .npy and .npz checked against files NumPy wrote
// (tests/data/npy, see make_fixtures.py there) and against headers written by hand from the
// format's specification; every malformed input an error naming the file; ONNX TensorProto
// files, including real ones from the ONNX node tests when ../shared has them.
#include "frontend/tensor_io.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "unit/frontend/frontend_test_util.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::is_error_with;
using ::kiln::testing::npy_fixture;
using ::kiln::testing::read_bytes;
using ::kiln::testing::ScratchDir;
using ::kiln::testing::write_bytes;

constexpr double kInf = std::numeric_limits<double>::infinity();

void expect_array(const Array& actual, DType dtype, const Shape& shape,
                  const std::vector<double>& data) {
  EXPECT_EQ(dtype_name(actual.dtype), dtype_name(dtype));
  EXPECT_EQ(actual.shape.to_string(), shape.to_string());
  EXPECT_EQ(actual.data, data);
}

// Values that every dtype stores differently (rounding, saturation, overflow to infinity).
Array sample_array(DType dtype, const Shape& shape) {
  const double pattern[] = {0.5, -1.25, 3.0, 1e-3, -7.0, 1e30, 65504.0, -0.0};
  std::vector<double> values(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = pattern[i % std::size(pattern)] + i;
  return Array(dtype, shape, std::move(values));
}

// The dtype an array of `dtype` has after a trip through a .npy file.
DType npy_round_trip_dtype(DType dtype) { return dtype == DType::bf16 ? DType::f32 : dtype; }

// A version 1.0 .npy file with `header` as its header text (no alignment padding: readers
// must not need it).
std::string npy_v1(std::string_view header, std::string_view data) {
  std::string bytes("\x93NUMPY\x01\x00", 8);
  const size_t length = header.size() + 1;
  bytes.push_back(static_cast<char>(length & 0xFF));
  bytes.push_back(static_cast<char>(length >> 8));
  bytes += header;
  bytes += '\n';
  bytes += data;
  return bytes;
}

// --------------------------------------------------------------------------------------------
// .npy

TEST(Npy, RoundTripsEveryDtype) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Array original = sample_array(dtype, Shape{2, 3, 4});
    auto parsed = parse_npy(serialize_npy(original), "mem.npy");
    ASSERT_TRUE(parsed) << parsed.status().message();
    expect_array(*parsed, npy_round_trip_dtype(dtype), original.shape, original.data);
  }
}

TEST(Npy, RoundTripsScalarsAndZeroSizeArrays) {
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{2, 0, 3}, Shape{1}}) {
      SCOPED_TRACE(fmt::format("{}{}", dtype_name(dtype), shape.to_string()));
      const Array original = sample_array(dtype, shape);
      auto parsed = parse_npy(serialize_npy(original), "mem.npy");
      ASSERT_TRUE(parsed) << parsed.status().message();
      expect_array(*parsed, npy_round_trip_dtype(dtype), shape, original.data);
    }
  }
}

TEST(Npy, RoundTripsNaNAndInfinities) {
  for (DType dtype : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Array original(dtype, Shape{3}, {std::nan(""), kInf, -kInf});
    auto parsed = parse_npy(serialize_npy(original), "mem.npy");
    ASSERT_TRUE(parsed) << parsed.status().message();
    EXPECT_TRUE(std::isnan((*parsed)[0]));
    EXPECT_EQ((*parsed)[1], kInf);
    EXPECT_EQ((*parsed)[2], -kInf);
  }
}

TEST(Npy, WritesTheBytesTheFormatSpecifies) {
  // Magic, version 1.0, header length 118 (little-endian), then the header padded with spaces
  // so that magic + length + header + '\n' is 128 bytes, then the data.
  std::string expected("\x93NUMPY\x01\x00\x76\x00", 10);
  expected += "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  expected += std::string(128 - 10 - 59 - 1, ' ');
  expected += '\n';
  expected += std::string_view(
      "\x00\x00\x80\x3f"   // 1.0
      "\x00\x00\x00\x40"   // 2.0
      "\x00\x00\x00\xc0"   // -2.0
      "\x00\x00\x00\x00"   // 0.0
      "\x00\x00\x00\x3f"   // 0.5
      "\x00\x00\xc0\x3f",  // 1.5
      24);
  EXPECT_EQ(serialize_npy(Array(DType::f32, Shape{2, 3}, {1, 2, -2, 0, 0.5, 1.5})), expected);
}

TEST(Npy, WritesBoolAsOneBytePerElement) {
  const std::string bytes = serialize_npy(Array(DType::boolean, Shape{3}, {1, 0, 1}));
  EXPECT_NE(bytes.find("'descr': '|b1'"), std::string::npos);
  EXPECT_NE(bytes.find("'shape': (3,)"), std::string::npos);
  EXPECT_EQ(bytes.substr(bytes.size() - 3), std::string_view("\x01\x00\x01", 3));
}

TEST(Npy, WritesBfloat16AsFloat32) {
  const Array bf16(DType::bf16, Shape{2}, {1.0, -3.5});
  const std::string bytes = serialize_npy(bf16);
  EXPECT_NE(bytes.find("'descr': '<f4'"), std::string::npos);
  EXPECT_EQ(bytes.substr(bytes.size() - 8),
            std::string_view("\x00\x00\x80\x3f\x00\x00\x60\xc0", 8));
}

TEST(Npy, ReadsAHandWrittenHeaderInAnyKeyOrderAndQuoting) {
  const std::string bytes = npy_v1(
      R"({"shape": (2,), "fortran_order": False, "descr": "<i8"})",
      std::string_view("\x05\x00\x00\x00\x00\x00\x00\x00\xfe\xff\xff\xff\xff\xff\xff\xff", 16));
  auto array = parse_npy(bytes, "hand.npy");
  ASSERT_TRUE(array) << array.status().message();
  expect_array(*array, DType::i64, Shape{2}, {5, -2});
}

TEST(Npy, ReadsFilesWrittenByNumPyAndWritesThemByteForByte) {
  struct Case {
    const char* file;
    DType dtype;
    Shape shape;
    std::vector<double> data;
  };
  const Case cases[] = {
      {"f32_2x3.npy",
       DType::f32,
       Shape{2, 3},
       {0.5, -1.25, 3.0, static_cast<double>(1e-3f), 0.0, 65504.0}},
      {"f16.npy", DType::f16, Shape{4}, {1.0, -2.5, 65504.0, std::ldexp(1.0, -24)}},
      {"bool.npy", DType::boolean, Shape{3}, {1, 0, 1}},
      {"scalar_f64.npy", DType::f64, Shape{}, {3.25}},
      {"empty_f32_0x3.npy", DType::f32, Shape{0, 3}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string path = npy_fixture(c.file);
    auto array = read_npy(path);
    ASSERT_TRUE(array) << array.status().message();
    expect_array(*array, c.dtype, c.shape, c.data);
    EXPECT_EQ(serialize_npy(*array), read_bytes(path));
  }
}

TEST(Npy, TransposesFortranOrderFromNumPy) {
  // np.asfortranarray(np.arange(6.).reshape(2, 3)): stored 0 3 1 4 2 5.
  auto array = read_npy(npy_fixture("f64_fortran_2x3.npy"));
  ASSERT_TRUE(array) << array.status().message();
  expect_array(*array, DType::f64, Shape{2, 3}, {0, 1, 2, 3, 4, 5});
}

TEST(Npy, TransposesFortranOrderInThreeDimensions) {
  // Element (i, j, k) of a [2,3,2] array is 100i + 10j + k; column-major order puts it at
  // position i + 2j + 6k.
  std::string data(12, '\0');
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 2; ++k)
        data[static_cast<size_t>(i + 2 * j + 6 * k)] = static_cast<char>(100 * i + 10 * j + k);
    }
  }
  auto array = parse_npy(
      npy_v1("{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3, 2), }", data), "f.npy");
  ASSERT_TRUE(array) << array.status().message();
  expect_array(*array, DType::i32, Shape{2, 3, 2},
               {0, 1, 10, 11, 20, 21, 100, 101, 110, 111, 120, 121});
}

TEST(Npy, ReadsBigEndian) {
  auto from_numpy = read_npy(npy_fixture("i4_big_endian.npy"));
  ASSERT_TRUE(from_numpy) << from_numpy.status().message();
  expect_array(*from_numpy, DType::i32, Shape{3}, {1, -2, 300000});

  auto by_hand = parse_npy(npy_v1("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
                                  std::string_view("\x3f\x80\x00\x00\xc0\x60\x00\x00", 8)),
                           "be.npy");
  ASSERT_TRUE(by_hand) << by_hand.status().message();
  expect_array(*by_hand, DType::f32, Shape{2}, {1.0, -3.5});
}

TEST(Npy, ReadsFormatVersions2And3) {
  auto v2 = read_npy(npy_fixture("i8_v2.npy"));
  ASSERT_TRUE(v2) << v2.status().message();
  expect_array(*v2, DType::i64, Shape{2}, {-1099511627776.0, 7});

  auto v3 = read_npy(npy_fixture("u1_v3.npy"));
  ASSERT_TRUE(v3) << v3.status().message();
  expect_array(*v3, DType::i32, Shape{3}, {0, 200, 255});
}

TEST(Npy, WritesVersion2WhenTheHeaderDoesNotFitVersion1) {
  const Array array(DType::f32, Shape(std::vector<int64_t>(30000, 1)), {2.5});
  const std::string bytes = serialize_npy(array);
  EXPECT_EQ(bytes.substr(0, 8), std::string_view("\x93NUMPY\x02\x00", 8));
  auto parsed = parse_npy(bytes, "long.npy");
  ASSERT_TRUE(parsed) << parsed.status().message();
  EXPECT_EQ(*parsed, array);
}

TEST(Npy, RejectsUnsigned64BitValuesOutsideI64) {
  const auto file = [](std::string_view value) {
    return npy_v1("{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }",
                  std::string(8, '\0') + std::string(value));
  };
  auto too_big = parse_npy(file(std::string_view("\x00\x00\x00\x00\x00\x00\x00\x80", 8)), "u.npy");
  EXPECT_TRUE(is_error_with(too_big.status(),
                            {"u.npy", "element 1", "9223372036854775808", "does not fit in i64"}));
  auto largest = parse_npy(file("\xff\xff\xff\xff\xff\xff\xff\x7f"), "u.npy");
  ASSERT_TRUE(largest) << largest.status().message();
  EXPECT_EQ(largest->dtype, DType::i64);
}

TEST(Npy, EveryTruncationOfAFileIsAnError) {
  const std::string bytes = read_bytes(npy_fixture("f32_2x3.npy"));
  for (size_t length = 0; length < bytes.size(); ++length) {
    auto array = parse_npy(std::string_view(bytes).substr(0, length), "cut.npy");
    EXPECT_TRUE(is_error_with(array.status(), {"cut.npy"})) << "length " << length;
  }
}

TEST(Npy, ErrorsSayWhatIsWrong) {
  struct Case {
    std::string name;
    std::string bytes;
    std::vector<std::string_view> message_parts;
  };
  const std::string_view f32_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::vector<Case> cases = {
      {"bad magic", "\x93NUMPX\x01\x00\x00\x00", {"bad magic"}},
      {"empty", "", {"bad magic"}},
      {"version 4", std::string("\x93NUMPY\x04\x00\x10\x00", 10), {"version 4.0"}},
      {"header longer than file",
       std::string("\x93NUMPY\x01\x00\xff\x00{}", 12),
       {"header", "255 bytes", "only 2"}},
      {"data missing",
       npy_v1(f32_header, std::string(20, '\0')),
       {"shape [2,3]", "'<f4'", "24 bytes", "20 bytes"}},
      {"data left over", npy_v1(f32_header, std::string(28, '\0')), {"24 bytes", "28 bytes"}},
      {"huge shape, little data",
       npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776,), }",
              std::string(8, '\0')),
       {"8796093022208 bytes", "8 bytes"}},
      {"more than 2^48 elements",
       npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 1073741824), }", ""),
       {"2^48"}},
      {"dimension beyond int64",
       npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", ""),
       {"out of range"}},
      {"negative dimension",
       npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", ""),
       {"negative"}},
      {"complex dtype",
       npy_v1("{'descr': '<c8', 'fortran_order': False, 'shape': (), }", ""),
       {"unsupported dtype '<c8'"}},
      {"object dtype",
       npy_v1("{'descr': '|O', 'fortran_order': False, 'shape': (), }", ""),
       {"unsupported dtype '|O'"}},
      {"no byte order on a 4-byte type",
       npy_v1("{'descr': '|f4', 'fortran_order': False, 'shape': (), }", ""),
       {"unsupported dtype '|f4'"}},
      {"structured dtype",
       npy_v1("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (), }", ""),
       {"structured"}},
      {"missing key", npy_v1("{'descr': '<f4', 'shape': (), }", ""), {"lacks", "fortran_order"}},
      {"unknown key",
       npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}", ""),
       {"unexpected key 'x'"}},
      {"duplicate key",
       npy_v1("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", ""),
       {"duplicate key 'descr'"}},
      {"shape not a tuple",
       npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (3)}", ""),
       {"not a tuple"}},
      {"not a dict", npy_v1("['<f4', False, ()]", ""), {"malformed header", "expected '{'"}},
      {"bad bool",
       npy_v1("{'descr': '<f4', 'fortran_order': 0, 'shape': ()}", ""),
       {"True or False"}},
      {"text after dict",
       npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': ()} x", ""),
       {"after"}},
      {"unterminated string", npy_v1("{'descr: '<f4'", ""), {"malformed header"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto array = parse_npy(c.bytes, "bad.npy");
    ASSERT_FALSE(array);
    EXPECT_TRUE(kiln::testing::contains_all(array.status().message(), {"bad.npy: "}));
    for (std::string_view part : c.message_parts) {
      EXPECT_TRUE(kiln::testing::contains_all(array.status().message(), {part}));
    }
  }
}

TEST(Npy, FileErrorsNameTheFile) {
  ScratchDir dir;
  EXPECT_TRUE(
      is_error_with(read_npy(dir.file("missing.npy")).status(), {"missing.npy", "no such file"}));
  write_bytes(dir.file("text.npy"), "hello");
  EXPECT_TRUE(is_error_with(read_npy(dir.file("text.npy")).status(), {"text.npy", "bad magic"}));
  EXPECT_TRUE(
      is_error_with(write_npy(dir.file("no/such/folder/x.npy"), Array::scalar(DType::f32, 1)),
                    {"x.npy", "cannot open for writing"}));
}

TEST(Npy, WritesAndReadsFiles) {
  ScratchDir dir;
  const Array original = sample_array(DType::i64, Shape{4, 2});
  ASSERT_TRUE(write_npy(dir.file("a.npy"), original));
  auto array = read_npy(dir.file("a.npy"));
  ASSERT_TRUE(array) << array.status().message();
  EXPECT_EQ(*array, original);
}

// --------------------------------------------------------------------------------------------
// .npz

TEST(Npz, ReadsNumPySavezWithEveryWidenedIntegerType) {
  auto entries = read_npz(npy_fixture("small_ints.npz"));
  ASSERT_TRUE(entries) << entries.status().message();
  ASSERT_EQ(entries->size(), 5u);
  const std::vector<std::string> names = {"i1", "i2", "u2", "u4", "u8"};
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ((*entries)[i].name, names[i]);
  expect_array((*entries)[0].array, DType::i32, Shape{2}, {-128, 127});
  expect_array((*entries)[1].array, DType::i32, Shape{2}, {-32768, 32767});
  expect_array((*entries)[2].array, DType::i32, Shape{1}, {65535});
  expect_array((*entries)[3].array, DType::i64, Shape{1}, {4294967295.0});
  expect_array((*entries)[4].array, DType::i64, Shape{1}, {9007199254740992.0});
}

TEST(Npz, ReadsNumPySavezCompressed) {
  auto entries = read_npz(npy_fixture("compressed.npz"));
  ASSERT_TRUE(entries) << entries.status().message();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].name, "weight");
  expect_array((*entries)[0].array, DType::f32, Shape{3, 4},
               {0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.25, 2.5, 2.75});
  EXPECT_EQ((*entries)[1].name, "bias");
  expect_array((*entries)[1].array, DType::f32, Shape{2}, {0.5, -0.5});
}

TEST(Npz, RoundTripsEveryDtypeInOrder) {
  ScratchDir dir;
  std::vector<NamedArray> entries;
  for (DType dtype : kAllDTypes) {
    entries.push_back({fmt::format("z_{}", dtype_name(dtype)), sample_array(dtype, Shape{3, 2})});
    entries.push_back({fmt::format("scalar_{}", dtype_name(dtype)), sample_array(dtype, Shape{})});
    entries.push_back(
        {fmt::format("empty_{}", dtype_name(dtype)), sample_array(dtype, Shape{0, 4})});
  }
  ASSERT_TRUE(write_npz(dir.file("all.npz"), entries));
  auto read = read_npz(dir.file("all.npz"));
  ASSERT_TRUE(read) << read.status().message();
  ASSERT_EQ(read->size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    SCOPED_TRACE(entries[i].name);
    EXPECT_EQ((*read)[i].name, entries[i].name);
    expect_array((*read)[i].array, npy_round_trip_dtype(entries[i].array.dtype),
                 entries[i].array.shape, entries[i].array.data);
  }
}

TEST(Npz, WritesAnEmptyArchive) {
  ScratchDir dir;
  ASSERT_TRUE(write_npz(dir.file("empty.npz"), {}));
  auto read = read_npz(dir.file("empty.npz"));
  ASSERT_TRUE(read) << read.status().message();
  EXPECT_TRUE(read->empty());
}

TEST(Npz, EqualEntriesGiveEqualFiles) {
  ScratchDir dir;
  const std::vector<NamedArray> entries = {{"w", sample_array(DType::f32, Shape{5})}};
  ASSERT_TRUE(write_npz(dir.file("a.npz"), entries));
  ASSERT_TRUE(write_npz(dir.file("b.npz"), entries));
  EXPECT_EQ(read_bytes(dir.file("a.npz")), read_bytes(dir.file("b.npz")));
}

TEST(Npz, RejectsBadEntryNames) {
  ScratchDir dir;
  const Array one = Array::scalar(DType::f32, 1);
  EXPECT_TRUE(is_error_with(write_npz(dir.file("d.npz"), {{"a", one}, {"a", one}}),
                            {"d.npz", "duplicate entry name 'a'"}));
  EXPECT_TRUE(is_error_with(write_npz(dir.file("e.npz"), {{"", one}}), {"e.npz", "empty name"}));
  EXPECT_FALSE(std::filesystem::exists(dir.file("d.npz")));
}

TEST(Npz, RejectsMembersThatAreNotNpyFiles) {
  // Renaming a member in both the local and the central header keeps the archive valid.
  std::string bytes = read_bytes(npy_fixture("small_ints.npz"));
  for (size_t at = bytes.find("i1.npy"); at != std::string::npos; at = bytes.find("i1.npy")) {
    bytes.replace(at, 6, "i1.txt");
  }
  EXPECT_TRUE(is_error_with(parse_npz(bytes, "renamed.npz").status(),
                            {"renamed.npz", "member 'i1.txt' is not a .npy file"}));
}

TEST(Npz, CorruptMembersAreErrors) {
  const std::string stored = read_bytes(npy_fixture("small_ints.npz"));
  std::string flipped = stored;
  const size_t data_of_i1 = stored.find("\x93NUMPY") + 128;
  flipped[data_of_i1] = static_cast<char>(flipped[data_of_i1] ^ 0x40);
  EXPECT_TRUE(is_error_with(parse_npz(flipped, "crc.npz").status(), {"crc.npz", "'i1.npy'"}));

  // The first member's compressed data follows its 30-byte local header, name and extra field.
  std::string compressed = read_bytes(npy_fixture("compressed.npz"));
  const auto u16_at = [&](size_t at) {
    return static_cast<size_t>(static_cast<unsigned char>(compressed[at])) |
           static_cast<size_t>(static_cast<unsigned char>(compressed[at + 1])) << 8;
  };
  const size_t deflate_data = 30 + u16_at(26) + u16_at(28);
  compressed[deflate_data] = static_cast<char>(compressed[deflate_data] ^ 0xFF);
  EXPECT_TRUE(
      is_error_with(parse_npz(compressed, "bad.npz").status(), {"bad.npz", "'weight.npy'"}));
}

TEST(Npz, MemberErrorsNameArchiveAndMember) {
  // np.savez of a float32 and a complex64 array.
  EXPECT_TRUE(is_error_with(read_npz(npy_fixture("complex.npz")).status(),
                            {"complex.npz: member 'c.npy': unsupported dtype '<c8'"}));
}

TEST(Npz, EveryTruncationIsAnError) {
  const std::string bytes = read_bytes(npy_fixture("compressed.npz"));
  for (size_t length = 0; length < bytes.size(); ++length) {
    auto entries = parse_npz(std::string_view(bytes).substr(0, length), "cut.npz");
    EXPECT_TRUE(is_error_with(entries.status(), {"cut.npz"})) << "length " << length;
  }
}

TEST(Npz, NotAZipArchive) {
  ScratchDir dir;
  write_bytes(dir.file("text.npz"), "this is not a zip archive at all");
  EXPECT_TRUE(
      is_error_with(read_npz(dir.file("text.npz")).status(), {"text.npz", "not a valid zip"}));
  EXPECT_TRUE(is_error_with(read_npz(dir.file("missing.npz")).status(), {"missing.npz"}));
}

// --------------------------------------------------------------------------------------------
// ONNX TensorProto files

TEST(TensorProtoFile, RoundTripsEveryDtype) {
  ScratchDir dir;
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{2, 3}, Shape{}, Shape{0, 2}}) {
      SCOPED_TRACE(fmt::format("{}{}", dtype_name(dtype), shape.to_string()));
      const Array original = sample_array(dtype, shape);
      ASSERT_TRUE(write_tensor_proto_file(dir.file("t.pb"), "tensor_name", original));
      auto read = read_tensor_proto_file(dir.file("t.pb"));
      ASSERT_TRUE(read) << read.status().message();
      EXPECT_EQ(read->name, "tensor_name");
      EXPECT_EQ(read->array, original);
    }
  }
}

TEST(TensorProtoFile, MalformedFilesAreErrors) {
  ScratchDir dir;
  write_bytes(dir.file("bad.pb"), "\xff\xff\xff\xff");
  EXPECT_TRUE(is_error_with(read_tensor_proto_file(dir.file("bad.pb")).status(),
                            {"bad.pb", "not a valid ONNX TensorProto"}));
  EXPECT_TRUE(
      is_error_with(read_tensor_proto_file(dir.file("none.pb")).status(), {"none.pb", "no such"}));
}

// Files of the ONNX node tests; the expected values were read with onnx.numpy_helper.
class OnnxNodeTestFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = kiln::testing::onnx_node_tests_dir();
    if (!dir) GTEST_SKIP() << "no onnx-node-tests (set KILN_SHARED_DIR)";
    dir_ = *dir;
  }
  Expected<NamedArray> read(std::string_view test, std::string_view file = "input_0.pb") const {
    return read_tensor_proto_file((dir_ / test / "test_data_set_0" / file).string());
  }
  std::filesystem::path dir_;
};

TEST_F(OnnxNodeTestFiles, Float) {
  auto x = read("test_add");
  ASSERT_TRUE(x) << x.status().message();
  EXPECT_EQ(x->name, "x");
  EXPECT_EQ(x->array.type().to_string(), "f32[3,4,5]");
  EXPECT_EQ(x->array[0], static_cast<double>(1.764052391052246f));
  EXPECT_EQ(x->array[1], static_cast<double>(0.40015721321105957f));
  EXPECT_EQ(x->array[59], static_cast<double>(-0.3627411723136902f));
}

TEST_F(OnnxNodeTestFiles, Float16) {
  auto input = read("test_cast_FLOAT16_to_DOUBLE");
  ASSERT_TRUE(input) << input.status().message();
  EXPECT_EQ(input->array.type().to_string(), "f16[3,4]");
  EXPECT_EQ(input->array[0], 0.6123046875);
  EXPECT_EQ(input->array[2], 0.94384765625);

  auto output = read("test_cast_FLOAT_to_FLOAT16", "output_0.pb");
  ASSERT_TRUE(output) << output.status().message();
  EXPECT_EQ(output->array.type().to_string(), "f16[3,4]");
  EXPECT_EQ(output->array[0], 0.548828125);
  EXPECT_EQ(output->array[11], 0.52880859375);
}

TEST_F(OnnxNodeTestFiles, Bool) {
  auto x = read("test_and2d");
  ASSERT_TRUE(x) << x.status().message();
  expect_array(x->array, DType::boolean, Shape{3, 4}, {1, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1});
}

TEST_F(OnnxNodeTestFiles, Integers) {
  auto int64 = read("test_constantofshape_float_ones");
  ASSERT_TRUE(int64) << int64.status().message();
  expect_array(int64->array, DType::i64, Shape{3}, {4, 3, 2});

  auto uint64 = read("test_bitshift_left_uint64");
  ASSERT_TRUE(uint64) << uint64.status().message();
  expect_array(uint64->array, DType::i64, Shape{3}, {16, 4, 1});

  auto int32_scalar = read("test_blackmanwindow");
  ASSERT_TRUE(int32_scalar) << int32_scalar.status().message();
  expect_array(int32_scalar->array, DType::i32, Shape{}, {10});

  auto uint8 = read("test_add_uint8");
  ASSERT_TRUE(uint8) << uint8.status().message();
  EXPECT_EQ(uint8->array.type().to_string(), "i32[3,4,5]");
  EXPECT_EQ(uint8->array[0], 12);
  EXPECT_EQ(uint8->array[3], 15);
  EXPECT_EQ(uint8->array[59], 8);
}

TEST_F(OnnxNodeTestFiles, UnsupportedAndForeignFilesAreErrors) {
  EXPECT_TRUE(
      is_error_with(read("test_cast_STRING_to_FLOAT").status(),
                    {"input_0.pb", "tensor 'input'", "unsupported tensor data type STRING"}));
  // A SequenceProto, not a TensorProto: it parses as protobuf, but its fields make no tensor.
  EXPECT_TRUE(is_error_with(read("test_identity_sequence").status(), {"input_0.pb"}));
}

}  // namespace
}  // namespace kiln
