// Writes safetensors files: used by `deepinfer make-tiny`, by tests that build checkpoints (and
// deliberately corrupt ones), and by tools. Output follows the format exactly: 8-byte little-endian
// header length, a JSON header padded with spaces to a multiple of 8, then the tensors' bytes
// back to back, ordered so that every tensor starts at a multiple of its element size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace deepinfer::io {

class SafetensorsWriter {
 public:
  // Adds a tensor (copied). Packed FP4 tensors (kF4E2M1, logical shape [.., n]) are stored as DeepSeek
  // stores them: dtype "I8", shape [.., n/2]. Duplicate names throw.
  void add(const std::string& name, const Tensor& tensor);
  // Adds raw bytes under any dtype spelling and shape: no consistency check, so tests can write
  // headers that a reader must reject.
  void add_raw(const std::string& name, const std::string& dtype_name, std::vector<std::int64_t> shape,
               std::vector<std::uint8_t> bytes);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  std::size_t size() const { return tensors_.size(); }
  std::vector<std::string> names() const;
  std::uint64_t data_bytes() const;

  // Writes the file (to a temporary name in the same directory, then renamed into place).
  void write(const std::filesystem::path& path) const;
  // The complete file contents.
  std::vector<std::uint8_t> serialize() const;

 private:
  struct Pending {
    std::string name;
    std::string dtype_name;
    std::vector<std::int64_t> shape;
    std::vector<std::uint8_t> bytes;
    int alignment = 1;
  };
  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes a model.safetensors.index.json for shards already written: weight_map maps each tensor
// name to its shard's file name; metadata.total_size is the sum of the tensors' bytes.
void write_safetensors_index(const std::filesystem::path& path,
                             const std::map<std::string, std::string>& weight_map, std::uint64_t total_size);

}  // namespace deepinfer::io
