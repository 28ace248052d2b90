// Safetensors files: header parsing with the full validation of the format, memory-mapped reading
// with zero-copy tensor views, and sharded checkpoints (model.safetensors.index.json).
//
// Interface for the rest of the engine:
//   auto file = io::SafetensorsFile::open("model.safetensors");
//   Tensor t = file->tensor("embed.weight");       // view into the mapping; no copy
//   auto shards = io::ShardedSafetensors::open(dir); // index.json, model.safetensors or all *.safetensors
//   Tensor w = shards.tensor("layers.0.attn.wq_a.weight");
// Views keep the mapping alive (the mapping is their owner) and are READ-ONLY: the file is mapped
// PROT_READ, so writing through a view faults. Clone a view before modifying it.
// Every failure is a deepinfer::Error naming the file and the tensor or header field at fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensor/tensor.h"

namespace deepinfer::io {

// The largest header we accept (the reference implementation's limit): a corrupt length field
// must not make us allocate or scan gigabytes.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::string dtype_name;  // the header's spelling ("F8_E4M3", "I8", "F4", ...)
  Shape shape;
  std::uint64_t begin = 0;  // byte range [begin, end) inside the data buffer (after the header)
  std::uint64_t end = 0;
  std::uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;        // sorted by `begin`
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" object
  std::uint64_t data_offset = 0;                // 8 + header length: where the data buffer starts
  std::uint64_t data_size = 0;                  // bytes after the header; the entries tile it exactly

  // nullptr if there is no tensor of that name.
  const SafetensorsEntry* find(std::string_view name) const;

 private:
  friend SafetensorsHeader parse_safetensors_header(std::span<const std::uint8_t>, std::string_view);
  std::unordered_map<std::string, std::size_t> index_;
};

// Parses and validates the safetensors file whose complete contents are `file` (the fuzz target
// calls this directly). Checks: 8-byte length present and within the file and the size limit; the
// header is a JSON object with no duplicate keys; "__metadata__" maps strings to strings; every
// tensor has a known dtype, a shape of non-negative extents (at most Shape::kMaxDims), and
// data_offsets [begin, end] with end - begin == numel * element size; the tensors' byte ranges
// tile the data buffer exactly (no gap, no overlap, nothing past the end). `file_label` names the
// file in error messages.
SafetensorsHeader parse_safetensors_header(std::span<const std::uint8_t> file, std::string_view file_label);

// Parses a safetensors dtype spelling. Besides the names of tensor/dtype.h this accepts "F4"
// (the safetensors spelling of packed E2M1) and "F8_E8M0"/"F8_E8M0FNU" for UE8M0 scales.
std::optional<DType> safetensors_dtype(std::string_view name);

class MappedFile;

// One memory-mapped safetensors file. Create through open(); shared so views can own it.
class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  static std::shared_ptr<const SafetensorsFile> open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  bool has(std::string_view name) const { return header_.find(name) != nullptr; }
  // Names in data order.
  std::vector<std::string> names() const;
  // A zero-copy view with the stored dtype and shape. (A tensor whose bytes are not aligned to its
  // element size in the file is copied once into aligned memory so typed access stays defined.)
  Tensor tensor(std::string_view name) const;
  Tensor tensor(const SafetensorsEntry& entry) const;

  SafetensorsFile(std::filesystem::path path, std::shared_ptr<const MappedFile> mapping, SafetensorsHeader header);

 private:
  std::filesystem::path path_;
  std::shared_ptr<const MappedFile> mapping_;
  SafetensorsHeader header_;
};

// Several safetensors files seen as one name -> tensor table: a sharded checkpoint described by
// model.safetensors.index.json ("weight_map": name -> shard file), a single model.safetensors,
// or (no index) every *.safetensors file of a directory. Names must be unique across files.
class ShardedSafetensors {
 public:
  // Opens the checkpoint in `directory`. Errors: no safetensors files; an index that is not valid
  // JSON, lacks "weight_map", names a shard that does not exist (or escapes the directory), or names
  // a tensor that its shard does not contain; a tensor name present in two files.
  static ShardedSafetensors open(const std::filesystem::path& directory);
  // Opens exactly these files (no index).
  static ShardedSafetensors open_files(const std::vector<std::filesystem::path>& files);

  bool has(std::string_view name) const { return where_.count(std::string(name)) != 0; }
  Tensor tensor(std::string_view name) const;
  const SafetensorsEntry& entry(std::string_view name) const;
  // The file holding `name` (for messages).
  const std::filesystem::path& file_of(std::string_view name) const;
  // All names, sorted.
  std::vector<std::string> names() const;
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }
  // The index file used, or empty.
  const std::filesystem::path& index_path() const { return index_path_; }

 private:
  struct Location {
    std::size_t file = 0;
    const SafetensorsEntry* entry = nullptr;
  };
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::unordered_map<std::string, Location> where_;
  std::filesystem::path index_path_;

  void add_file(std::shared_ptr<const SafetensorsFile> file, const std::vector<std::string>* only);
  const Location& locate(std::string_view name) const;
};

}  // namespace deepinfer::io
