// Safetensors: round trips through the writer and the mapped reader, every corrupt-header case
// (each error names the file and the tensor or field), and sharded checkpoints.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>

#include "common/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "io/temp_dir.h"
#include "tensor/float_formats.h"

namespace deepinfer::io {
namespace {

using deepinfer::testing::TempDir;

std::vector<std::uint8_t> with_header(const std::string& header, std::size_t data_bytes) {
  std::vector<std::uint8_t> out(8 + header.size() + data_bytes, 0);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

std::string parse_error(const std::vector<std::uint8_t>& file) {
  try {
    parse_safetensors_header(file, "bad.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

Tensor iota_f32(const Shape& shape, float start = 0.0f) {
  std::vector<float> values(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = start + static_cast<float>(i);
  return Tensor::from_f32(shape, values);
}

TEST(Safetensors, WrittenTensorsReadBackAsZeroCopyViews) {
  TempDir dir;
  SafetensorsWriter writer;
  writer.add("a.f32", iota_f32(Shape{3, 5}));
  writer.add("b.bf16", iota_f32(Shape{7}, 1.0f).to(DType::kBF16));  // odd size: alignment must still hold
  Tensor ids = Tensor::empty(Shape{2, 3}, DType::kI64);
  for (int i = 0; i < 6; ++i) ids.data<std::int64_t>()[i] = 1000 + i;
  writer.add("c.i64", ids);
  Tensor fp4 = Tensor::empty(Shape{2, 4}, DType::kF4E2M1);
  for (int i = 0; i < 4; ++i) fp4.data<std::uint8_t>()[i] = fp4_pack(static_cast<std::uint8_t>(i), 0x9);
  writer.add("d.fp4", fp4);
  writer.set_metadata("format", "pt");
  writer.write(dir / "m.safetensors");

  const auto file = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_EQ(file->header().metadata.at("format"), "pt");
  EXPECT_EQ(file->header().data_offset % 8, 0u);
  const Tensor a = file->tensor("a.f32");
  EXPECT_EQ(a.dtype(), DType::kF32);
  EXPECT_EQ(a.shape(), (Shape{3, 5}));
  EXPECT_EQ(a.item_f32(14), 14.0f);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.raw_data()) % 4, 0u);
  EXPECT_EQ(file->tensor("a.f32").raw_data(), a.raw_data()) << "views must share the mapping, not copy";
  EXPECT_EQ(file->tensor("b.bf16").item_f32(6), 7.0f);
  EXPECT_EQ(file->tensor("c.i64").data<std::int64_t>()[5], 1005);
  const Tensor packed = file->tensor("d.fp4");
  EXPECT_EQ(packed.dtype(), DType::kI8) << "fp4 is stored as DeepSeek stores it";
  EXPECT_EQ(packed.shape(), (Shape{2, 2}));
  EXPECT_EQ(static_cast<std::uint8_t>(packed.data<std::int8_t>()[3]), fp4_pack(3, 0x9));
  EXPECT_THROW(file->tensor("missing"), Error);
}

TEST(Safetensors, ViewsKeepTheMappingAliveAfterTheFileObjectIsGone) {
  TempDir dir;
  SafetensorsWriter writer;
  writer.add("x", iota_f32(Shape{4}, 3.0f));
  writer.write(dir / "m.safetensors");
  Tensor view = SafetensorsFile::open(dir / "m.safetensors")->tensor("x");
  EXPECT_EQ(view.item_f32(3), 6.0f);
}

TEST(Safetensors, AcceptsF4AndE8M0Spellings) {
  const auto bytes = with_header(R"({"w":{"dtype":"F4","shape":[2,4],"data_offsets":[0,4]},)"
                                 R"("s":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[4,6]}})",
                                 6);
  const auto header = parse_safetensors_header(bytes, "ok.safetensors");
  EXPECT_EQ(header.find("w")->dtype, DType::kF4E2M1);
  EXPECT_EQ(header.find("s")->dtype, DType::kUE8M0);
}

struct CorruptCase {
  const char* what;
  std::vector<std::uint8_t> file;
  const char* expect;  // substring of the message besides the file name
};

TEST(Safetensors, CorruptHeadersAreRejectedWithTheFileAndTensorNamed) {
  const std::string ok_entry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::vector<std::uint8_t> huge(16, 0);
  huge[5] = 0x7f;  // header length ~ 2^47
  std::vector<std::uint8_t> past_end = with_header("{}", 0);
  past_end[0] = 200;
  const std::vector<CorruptCase> cases = {
      {"too short", {1, 2, 3}, "too short"},
      {"absurd header length", huge, "exceeds the 100000000-byte limit"},
      {"header length past EOF", past_end, "runs past the end of the file"},
      {"bad JSON", with_header("{\"t\": {", 0), "not valid JSON"},
      {"not an object", with_header("[1, 2]", 0), "not a JSON object"},
      {"missing dtype", with_header(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8), "tensor 't' has no dtype"},
      {"missing shape", with_header(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", 8), "tensor 't' has no shape"},
      {"missing offsets", with_header(R"({"t":{"dtype":"F32","shape":[2]}})", 8), "tensor 't' has no data_offsets"},
      {"unknown dtype", with_header(R"({"t":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,8]}})", 8),
       "tensor 't': unknown dtype 'Q4_K'"},
      {"offsets past the end", with_header("{" + ok_entry + "}", 4), "tensor 't': data_offsets [0, 8] run past the end"},
      {"size mismatch", with_header(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "tensor 't': data_offsets [0, 8] hold 8 bytes but F32 [3] needs 12"},
      {"overlap", with_header("{" + ok_entry + R"(,"u":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
       "tensor 'u' (bytes [4, 8)) overlaps tensor 't'"},
      {"gap", with_header(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
       "bytes [0, 4) before tensor 't' belong to no tensor"},
      {"trailing bytes", with_header("{" + ok_entry + "}", 12), "4 bytes after the last tensor"},
      {"duplicate name", with_header("{" + ok_entry + "," + ok_entry + "}", 8), "names tensor 't' twice"},
      {"negative extent", with_header(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       "tensor 't': shape entries must be non-negative integers"},
      {"fractional extent", with_header(R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})", 8),
       "shape entries must be non-negative integers"},
      {"too many dims", with_header(R"({"t":{"dtype":"U8","shape":[1,1,1,1,1,1,1],"data_offsets":[0,1]}})", 1),
       "tensor 't': shape has 7 dimensions"},
      {"element overflow",
       with_header(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}})", 8),
       "more elements than fit in 64 bits"},
      {"end before begin", with_header(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8), "end before they begin"},
      {"bad offsets", with_header(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "data_offsets must be two"},
      {"metadata not strings", with_header(R"({"__metadata__":{"a":1}})", 0), "__metadata__ value of 'a' must be a string"},
      {"entry not an object", with_header(R"({"t":[1,2]})", 0), "tensor 't': expected an object"},
      {"odd fp4 row", with_header(R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", 1), "do not fill whole bytes"},
      {"deep nesting", with_header("{\"t\":" + std::string(5000, '[') + std::string(5000, ']') + "}", 0),
       "nested deeper than 64 levels"},
  };
  for (const auto& c : cases) {
    const std::string message = parse_error(c.file);
    EXPECT_NE(message.find("bad.safetensors"), std::string::npos) << c.what << ": " << message;
    EXPECT_NE(message.find(c.expect), std::string::npos) << c.what << ": " << message;
  }
}

TEST(Safetensors, EmptyAndZeroSizedTensorsAreValid) {
  EXPECT_TRUE(parse_safetensors_header(with_header("{}", 0), "empty").entries.empty());
  const auto header = parse_safetensors_header(
      with_header(R"({"z":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2),
      "zero");
  EXPECT_EQ(header.entries.size(), 2u);
}

void write_shard(const std::filesystem::path& path, const std::map<std::string, float>& tensors) {
  SafetensorsWriter writer;
  for (const auto& [name, value] : tensors) writer.add(name, iota_f32(Shape{2}, value));
  writer.write(path);
}

TEST(ShardedSafetensors, IndexJoinsShards) {
  TempDir dir;
  write_shard(dir / "model-00001-of-00002.safetensors", {{"a", 1.0f}, {"b", 2.0f}});
  write_shard(dir / "model-00002-of-00002.safetensors", {{"c", 3.0f}});
  write_safetensors_index(dir / "model.safetensors.index.json",
                          {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00001-of-00002.safetensors"},
                           {"c", "model-00002-of-00002.safetensors"}},
                          24);
  const auto shards = ShardedSafetensors::open(dir.path());
  EXPECT_EQ(shards.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(shards.tensor("c").item_f32(1), 4.0f);
  EXPECT_EQ(shards.file_of("b").filename(), "model-00001-of-00002.safetensors");
  EXPECT_EQ(shards.files().size(), 2u);
}

std::string open_error(const std::filesystem::path& dir) {
  try {
    ShardedSafetensors::open(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ShardedSafetensors, BrokenIndexesAreReportedByName) {
  TempDir dir;
  write_shard(dir / "s1.safetensors", {{"a", 1.0f}});
  const auto index = dir / "model.safetensors.index.json";
  write_safetensors_index(index, {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}, 0);
  std::string message = open_error(dir.path());
  EXPECT_NE(message.find("shard s2.safetensors (holding 'b'"), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;

  write_safetensors_index(index, {{"a", "s1.safetensors"}, {"z", "s1.safetensors"}}, 0);
  message = open_error(dir.path());
  EXPECT_NE(message.find("tensor 'z' is listed in shard s1.safetensors but that file does not contain it"), std::string::npos)
      << message;

  write_safetensors_index(index, {{"a", "../s1.safetensors"}}, 0);
  EXPECT_NE(open_error(dir.path()).find("not a file name inside the checkpoint directory"), std::string::npos);

  write_bytes(index, {'{', 'x'});
  EXPECT_NE(open_error(dir.path()).find("model.safetensors.index.json: not valid JSON"), std::string::npos);
  write_bytes(index, {'{', '}'});
  EXPECT_NE(open_error(dir.path()).find("weight_map"), std::string::npos);
}

TEST(ShardedSafetensors, WithoutIndexEveryFileIsReadAndDuplicatesAreErrors) {
  TempDir dir;
  EXPECT_NE(open_error(dir.path()).find("no safetensors files"), std::string::npos);
  write_shard(dir / "x.safetensors", {{"a", 1.0f}});
  write_shard(dir / "y.safetensors", {{"b", 1.0f}});
  EXPECT_EQ(ShardedSafetensors::open(dir.path()).names().size(), 2u);
  write_shard(dir / "z.safetensors", {{"a", 5.0f}});
  const std::string message = open_error(dir.path());
  EXPECT_NE(message.find("tensor 'a' is stored twice"), std::string::npos) << message;
  EXPECT_NE(open_error(dir / "x.safetensors").find("not a directory"), std::string::npos);
}

TEST(ShardedSafetensors, CorruptShardNamesTheShardFile) {
  TempDir dir;
  write_bytes(dir / "model.safetensors", with_header(R"({"t":{"dtype":"F32","shape":[9],"data_offsets":[0,8]}})", 8));
  const std::string message = open_error(dir.path());
  EXPECT_NE(message.find("model.safetensors: tensor 't'"), std::string::npos) << message;
}

}  // namespace
}  // namespace deepinfer::io
