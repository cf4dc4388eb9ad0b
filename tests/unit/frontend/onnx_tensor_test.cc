// ONNX TensorProto <-> Array (frontend/onnx_tensor.h): raw_data written by hand from the ONNX
// specification against the typed fields, every element type, the unsupported ones, and
// external data that must stay inside the model's folder.
#include "frontend/onnx_tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/tensor_io.h"
#include "unit/frontend/frontend_test_util.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::is_error_with;
using ::kiln::testing::ScratchDir;
using ::kiln::testing::write_bytes;

void expect_array(const Array& actual, DType dtype, const Shape& shape,
                  const std::vector<double>& data) {
  EXPECT_EQ(dtype_name(actual.dtype), dtype_name(dtype));
  EXPECT_EQ(actual.shape.to_string(), shape.to_string());
  EXPECT_EQ(actual.data, data);
}

onnx::TensorProto tensor(int32_t data_type, std::vector<int64_t> dims) {
  onnx::TensorProto proto;
  proto.set_name("t");
  proto.set_data_type(data_type);
  for (int64_t dim : dims) proto.add_dims(dim);
  return proto;
}

// One element type: two elements written as raw_data bytes and as the type's typed field.
struct RawTypedCase {
  std::string name;
  int32_t data_type;
  std::string raw;
  std::function<void(onnx::TensorProto&)> fill_typed;
  DType dtype;
  std::vector<double> values;
};

void PrintTo(const RawTypedCase& c, std::ostream* os) { *os << c.name; }

std::vector<RawTypedCase> raw_typed_cases() {
  using P = onnx::TensorProto;
  return {
      {"FLOAT",
       P::FLOAT,
       std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8),
       [](P& p) {
         p.add_float_data(1.0f);
         p.add_float_data(-2.0f);
       },
       DType::f32,
       {1, -2}},
      {"DOUBLE",
       P::DOUBLE,
       std::string("\x00\x00\x00\x00\x00\x00\xf0\x3f\x00\x00\x00\x00\x00\x00\x00\xc0", 16),
       [](P& p) {
         p.add_double_data(1.0);
         p.add_double_data(-2.0);
       },
       DType::f64,
       {1, -2}},
      {"FLOAT16",
       P::FLOAT16,
       std::string("\x00\x3c\x00\xc0", 4),
       [](P& p) {
         p.add_int32_data(0x3C00);
         p.add_int32_data(0xC000);
       },
       DType::f16,
       {1, -2}},
      {"BFLOAT16",
       P::BFLOAT16,
       std::string("\x80\x3f\x00\xc0", 4),
       [](P& p) {
         p.add_int32_data(0x3F80);
         p.add_int32_data(0xC000);
       },
       DType::bf16,
       {1, -2}},
      {"INT32",
       P::INT32,
       std::string("\xff\xff\xff\xff\x00\x00\x01\x00", 8),
       [](P& p) {
         p.add_int32_data(-1);
         p.add_int32_data(65536);
       },
       DType::i32,
       {-1, 65536}},
      {"INT64",
       P::INT64,
       std::string("\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x01\x00\x00\x00", 16),
       [](P& p) {
         p.add_int64_data(-1);
         p.add_int64_data(int64_t{1} << 32);
       },
       DType::i64,
       {-1, 4294967296.0}},
      {"BOOL",
       P::BOOL,
       std::string("\x01\x00", 2),
       [](P& p) {
         p.add_int32_data(1);
         p.add_int32_data(0);
       },
       DType::boolean,
       {1, 0}},
      {"INT8",
       P::INT8,
       std::string("\xff\x7f", 2),
       [](P& p) {
         p.add_int32_data(-1);
         p.add_int32_data(127);
       },
       DType::i32,
       {-1, 127}},
      {"INT16",
       P::INT16,
       std::string("\x00\x80\xff\x7f", 4),
       [](P& p) {
         p.add_int32_data(-32768);
         p.add_int32_data(32767);
       },
       DType::i32,
       {-32768, 32767}},
      {"UINT8",
       P::UINT8,
       std::string("\xff\x00", 2),
       [](P& p) {
         p.add_int32_data(255);
         p.add_int32_data(0);
       },
       DType::i32,
       {255, 0}},
      {"UINT16",
       P::UINT16,
       std::string("\xff\xff\x01\x00", 4),
       [](P& p) {
         p.add_int32_data(65535);
         p.add_int32_data(1);
       },
       DType::i32,
       {65535, 1}},
      {"UINT32",
       P::UINT32,
       std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8),
       [](P& p) {
         p.add_uint64_data(4294967295u);
         p.add_uint64_data(0);
       },
       DType::i64,
       {4294967295.0, 0}},
      {"UINT64",
       P::UINT64,
       std::string("\x00\x00\x00\x00\x00\x00\x20\x00\x01\x00\x00\x00\x00\x00\x00\x00", 16),
       [](P& p) {
         p.add_uint64_data(uint64_t{1} << 53);
         p.add_uint64_data(1);
       },
       DType::i64,
       {9007199254740992.0, 1}},
  };
}

class RawVsTyped : public ::testing::TestWithParam<RawTypedCase> {};

TEST_P(RawVsTyped, BothFormsGiveTheExpectedArray) {
  const RawTypedCase& c = GetParam();
  onnx::TensorProto raw = tensor(c.data_type, {2});
  raw.set_raw_data(c.raw);
  auto from_raw = array_from_tensor_proto(raw, "");
  ASSERT_TRUE(from_raw) << from_raw.status().message();
  expect_array(*from_raw, c.dtype, Shape{2}, c.values);

  onnx::TensorProto typed = tensor(c.data_type, {2});
  c.fill_typed(typed);
  auto from_typed = array_from_tensor_proto(typed, "");
  ASSERT_TRUE(from_typed) << from_typed.status().message();
  expect_array(*from_typed, c.dtype, Shape{2}, c.values);
}

TEST_P(RawVsTyped, WrongElementCountsAreErrors) {
  const RawTypedCase& c = GetParam();
  onnx::TensorProto raw = tensor(c.data_type, {3});
  raw.set_raw_data(c.raw);
  EXPECT_TRUE(is_error_with(array_from_tensor_proto(raw, "").status(),
                            {"tensor 't'", "raw_data has", "shape [3]", c.name}));

  onnx::TensorProto typed = tensor(c.data_type, {3});
  c.fill_typed(typed);
  EXPECT_TRUE(is_error_with(array_from_tensor_proto(typed, "").status(),
                            {"tensor 't'", "has 2 values, but shape [3] needs 3"}));
}

INSTANTIATE_TEST_SUITE_P(ElementTypes, RawVsTyped, ::testing::ValuesIn(raw_typed_cases()),
                         [](const auto& test_info) { return test_info.param.name; });

TEST(TensorProto, RoundTripsEveryDtypeThroughRawData) {
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{2, 2}, Shape{}, Shape{3, 0}}) {
      SCOPED_TRACE(fmt::format("{}{}", dtype_name(dtype), shape.to_string()));
      std::vector<double> values(static_cast<size_t>(shape.num_elements()));
      for (size_t i = 0; i < values.size(); ++i) values[i] = 1.5 * static_cast<double>(i) - 2.0;
      const Array original(dtype, shape, values);
      const onnx::TensorProto proto = tensor_proto_from_array("w", original);
      EXPECT_EQ(proto.name(), "w");
      EXPECT_TRUE(proto.has_raw_data());
      auto array = array_from_tensor_proto(proto, "");
      ASSERT_TRUE(array) << array.status().message();
      EXPECT_EQ(*array, original);
    }
  }
}

TEST(TensorProto, WritesTheElementTypeOfTheDtype) {
  using P = onnx::TensorProto;
  const std::pair<DType, int32_t> expected[] = {
      {DType::f32, P::FLOAT},     {DType::f64, P::DOUBLE}, {DType::f16, P::FLOAT16},
      {DType::bf16, P::BFLOAT16}, {DType::i32, P::INT32},  {DType::i64, P::INT64},
      {DType::boolean, P::BOOL}};
  for (const auto& [dtype, data_type] : expected) {
    EXPECT_EQ(tensor_proto_from_array("x", Array::scalar(dtype, 1)).data_type(), data_type)
        << dtype_name(dtype);
  }
  const P half = tensor_proto_from_array("h", Array(DType::f16, Shape{2}, {1.0, -2.0}));
  EXPECT_EQ(half.raw_data(), std::string("\x00\x3c\x00\xc0", 4));
}

TEST(TensorProto, Uint64ValuesOutsideI64AreErrors) {
  onnx::TensorProto raw = tensor(onnx::TensorProto::UINT64, {1});
  raw.set_raw_data(std::string("\x00\x00\x00\x00\x00\x00\x00\x80", 8));
  EXPECT_TRUE(is_error_with(array_from_tensor_proto(raw, "").status(),
                            {"tensor 't'", "9223372036854775808", "does not fit in i64"}));

  onnx::TensorProto typed = tensor(onnx::TensorProto::UINT64, {1});
  typed.add_uint64_data(uint64_t{1} << 63);
  EXPECT_TRUE(is_error_with(array_from_tensor_proto(typed, "").status(),
                            {"tensor 't'", "9223372036854775808", "does not fit in i64"}));

  onnx::TensorProto uint32 = tensor(onnx::TensorProto::UINT32, {1});
  uint32.add_uint64_data(uint64_t{1} << 32);
  EXPECT_TRUE(is_error_with(array_from_tensor_proto(uint32, "").status(),
                            {"4294967296", "does not fit in UINT32"}));
}

TEST(TensorProto, UnsupportedDataTypesAreNamed) {
  using P = onnx::TensorProto;
  const std::pair<int32_t, std::string_view> cases[] = {{P::STRING, "STRING"},
                                                        {P::COMPLEX64, "COMPLEX64"},
                                                        {P::COMPLEX128, "COMPLEX128"},
                                                        {P::UNDEFINED, "UNDEFINED"},
                                                        {999, "999"}};
  for (const auto& [data_type, name] : cases) {
    EXPECT_TRUE(is_error_with(array_from_tensor_proto(tensor(data_type, {1}), "").status(),
                              {"tensor 't'", "unsupported tensor data type", name}));
  }
}

TEST(TensorProto, BadShapesAreErrorsBeforeAnyAllocation) {
  onnx::TensorProto negative = tensor(onnx::TensorProto::FLOAT, {2, -1});
  EXPECT_TRUE(is_error_with(array_from_tensor_proto(negative, "").status(), {"negative"}));

  onnx::TensorProto huge = tensor(onnx::TensorProto::FLOAT, {int64_t{1} << 40, int64_t{1} << 40});
  EXPECT_TRUE(is_error_with(array_from_tensor_proto(huge, "").status(), {"2^48"}));

  // Allowed shape, but no data behind it: must fail on the size, not try to allocate.
  onnx::TensorProto no_data = tensor(onnx::TensorProto::DOUBLE, {int64_t{1} << 44});
  no_data.set_raw_data("12345678");
  EXPECT_TRUE(is_error_with(array_from_tensor_proto(no_data, "").status(),
                            {"raw_data has 8 bytes", "140737488355328"}));
  onnx::TensorProto no_field = tensor(onnx::TensorProto::FLOAT, {int64_t{1} << 44});
  EXPECT_TRUE(
      is_error_with(array_from_tensor_proto(no_field, "").status(), {"float_data has 0 values"}));
}

TEST(TensorProto, SegmentedTensorsAreErrors) {
  onnx::TensorProto proto = tensor(onnx::TensorProto::FLOAT, {1});
  proto.add_float_data(1.0f);
  proto.mutable_segment()->set_begin(0);
  EXPECT_TRUE(is_error_with(array_from_tensor_proto(proto, "").status(), {"segmented"}));
}

// --------------------------------------------------------------------------------------------
// External data

// A folder `model/` holding weights.bin (4 bytes of junk, then f32 1.0 and -2.0) and
// sub/w.bin (the two floats alone), beside a folder `outside/` holding secret.bin (the same
// two floats).
class ExternalData : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string floats("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
    std::filesystem::create_directories(model_dir() / "sub");
    std::filesystem::create_directories(outside_dir());
    write_bytes((model_dir() / "weights.bin").string(), "junk" + floats);
    write_bytes((model_dir() / "sub" / "w.bin").string(), floats);
    write_bytes((outside_dir() / "secret.bin").string(), floats);
  }

  std::filesystem::path model_dir() const { return scratch_.path() / "model"; }
  std::filesystem::path outside_dir() const { return scratch_.path() / "outside"; }

  // A FLOAT [2] tensor whose data is external, with the given keys and values.
  static onnx::TensorProto external(
      const std::vector<std::pair<std::string, std::string>>& entries) {
    onnx::TensorProto proto = tensor(onnx::TensorProto::FLOAT, {2});
    proto.set_data_location(onnx::TensorProto::EXTERNAL);
    for (const auto& [key, value] : entries) {
      onnx::StringStringEntryProto* entry = proto.add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    }
    return proto;
  }

  Status read(const onnx::TensorProto& proto) const {
    return array_from_tensor_proto(proto, model_dir().string()).status();
  }

  ScratchDir scratch_;
};

TEST_F(ExternalData, ReadsAtAnOffsetInsideTheFolder) {
  auto array = array_from_tensor_proto(
      external({{"location", "weights.bin"}, {"offset", "4"}, {"length", "8"}}),
      model_dir().string());
  ASSERT_TRUE(array) << array.status().message();
  expect_array(*array, DType::f32, Shape{2}, {1, -2});
}

TEST_F(ExternalData, ReadsFromASubfolderWithoutLength) {
  auto array = array_from_tensor_proto(external({{"location", "sub/w.bin"}}), model_dir().string());
  ASSERT_TRUE(array) << array.status().message();
  expect_array(*array, DType::f32, Shape{2}, {1, -2});
}

TEST_F(ExternalData, TensorProtoFilesLookInTheirOwnFolder) {
  onnx::TensorProto proto = external({{"location", "sub/w.bin"}});
  const std::string path = (model_dir() / "t.pb").string();
  write_bytes(path, proto.SerializeAsString());
  auto read = read_tensor_proto_file(path);
  ASSERT_TRUE(read) << read.status().message();
  expect_array(read->array, DType::f32, Shape{2}, {1, -2});
}

TEST_F(ExternalData, RejectsLocationsOutsideTheFolder) {
  const std::string secret = (outside_dir() / "secret.bin").string();
  EXPECT_TRUE(is_error_with(read(external({{"location", secret}})), {"tensor 't'", "is absolute"}));
  EXPECT_TRUE(is_error_with(read(external({{"location", "../outside/secret.bin"}})),
                            {"must not contain '..'"}));
  EXPECT_TRUE(is_error_with(read(external({{"location", "sub/../../outside/secret.bin"}})),
                            {"must not contain '..'"}));
  EXPECT_TRUE(is_error_with(read(external({{"location", "sub/../weights.bin"}})),
                            {"must not contain '..'"}));
}

TEST_F(ExternalData, RejectsSymlinksThatLeadOutside) {
  std::filesystem::create_symlink(outside_dir() / "secret.bin", model_dir() / "link.bin");
  std::filesystem::create_directory_symlink(outside_dir(), model_dir() / "linked_dir");
  EXPECT_TRUE(is_error_with(read(external({{"location", "link.bin"}})),
                            {"'link.bin' resolves to", "outside"}));
  EXPECT_TRUE(is_error_with(read(external({{"location", "linked_dir/secret.bin"}})),
                            {"resolves to", "outside"}));

  // A symlink that stays inside is fine.
  std::filesystem::create_symlink(model_dir() / "sub" / "w.bin", model_dir() / "inside.bin");
  EXPECT_TRUE(read(external({{"location", "inside.bin"}})).is_ok());
}

TEST_F(ExternalData, ChecksSizesBeforeReading) {
  EXPECT_TRUE(is_error_with(read(external({{"location", "weights.bin"}, {"offset", "8"}})),
                            {"has 12 bytes", "8 bytes at offset 8"}));
  EXPECT_TRUE(
      is_error_with(read(external({{"location", "weights.bin"}, {"offset", "99"}})), {"too few"}));
  EXPECT_TRUE(is_error_with(read(external({{"location", "weights.bin"}, {"length", "4"}})),
                            {"length 4", "8 bytes"}));
  onnx::TensorProto huge = external({{"location", "weights.bin"}});
  huge.set_dims(0, int64_t{1} << 40);
  EXPECT_TRUE(is_error_with(read(huge), {"too few"}));
}

TEST_F(ExternalData, MalformedEntriesAreErrors) {
  EXPECT_TRUE(is_error_with(read(external({})), {"no location"}));
  EXPECT_TRUE(
      is_error_with(read(external({{"location", "missing.bin"}})), {"'missing.bin' not found"}));
  EXPECT_TRUE(is_error_with(read(external({{"location", "sub"}})), {"'sub' not found"}));
  EXPECT_TRUE(is_error_with(read(external({{"location", "weights.bin"}, {"offset", "-4"}})),
                            {"offset '-4'"}));
  EXPECT_TRUE(is_error_with(read(external({{"location", "weights.bin"}, {"length", "8x"}})),
                            {"length '8x'"}));
  EXPECT_TRUE(is_error_with(read(external({{"location", std::string("a\0b", 3)}})), {"NUL"}));
}

TEST_F(ExternalData, NeedsABaseDirectory) {
  EXPECT_TRUE(
      is_error_with(array_from_tensor_proto(external({{"location", "weights.bin"}}), "").status(),
                    {"no base directory"}));
}

}  // namespace
}  // namespace kiln
