// SafetensorsWriter: builds the header, orders tensors for alignment and writes atomically.
#include "io/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "io/file_util.h"

namespace deepinfer::io {
namespace {

using json = nlohmann::json;

int alignment_of(DType dtype) { return std::max(1, dtype_bits(dtype) / 8); }

}  // namespace

void SafetensorsWriter::add(const std::string& name, const Tensor& tensor) {
  DI_CHECK(tensor.device().is_cpu(), "safetensors writer: tensor '{}' is not on the host", name);
  const Tensor host = tensor.is_contiguous() ? tensor : tensor.clone();
  std::vector<std::int64_t> shape(host.shape().dims().begin(), host.shape().dims().end());
  std::string stored_dtype;
  if (host.dtype() == DType::kF4E2M1) {
    // DeepSeek's convention for packed E2M1: I8 with the last dimension halved.
    DI_CHECK(!shape.empty() && shape.back() % 2 == 0, "safetensors writer: fp4 tensor '{}' needs an even last dimension", name);
    shape.back() /= 2;
    stored_dtype = "I8";
  } else {
    stored_dtype = std::string(dtype_safetensors_name(host.dtype()));
    DI_CHECK(!stored_dtype.empty(), "safetensors writer: tensor '{}': dtype {} has no safetensors name", name,
             dtype_name(host.dtype()));
  }
  const auto* bytes = static_cast<const std::uint8_t*>(host.raw_data());
  std::vector<std::uint8_t> data(bytes, bytes + host.nbytes());
  add_raw(name, stored_dtype, std::move(shape), std::move(data));
  tensors_.back().alignment = alignment_of(host.dtype());
}

void SafetensorsWriter::add_raw(const std::string& name, const std::string& dtype_spelling, std::vector<std::int64_t> shape,
                                std::vector<std::uint8_t> bytes) {
  DI_CHECK(name != "__metadata__", "safetensors writer: '__metadata__' is reserved");
  for (const auto& pending : tensors_)
    DI_CHECK(pending.name != name, "safetensors writer: tensor '{}' added twice", name);
  const auto dtype = dtype_from_safetensors_name(dtype_spelling);
  const int alignment = dtype ? alignment_of(*dtype) : 1;
  tensors_.push_back(Pending{name, dtype_spelling, std::move(shape), std::move(bytes), alignment});
}

std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> out;
  for (const auto& pending : tensors_) out.push_back(pending.name);
  return out;
}

std::uint64_t SafetensorsWriter::data_bytes() const {
  std::uint64_t total = 0;
  for (const auto& pending : tensors_) total += pending.bytes.size();
  return total;
}

std::vector<std::uint8_t> SafetensorsWriter::serialize() const {
  // Widest elements first: every tensor then starts at a multiple of its element size.
  std::vector<const Pending*> order;
  for (const auto& pending : tensors_) order.push_back(&pending);
  std::stable_sort(order.begin(), order.end(), [](const Pending* a, const Pending* b) { return a->alignment > b->alignment; });

  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::uint64_t offset = 0;
  for (const Pending* pending : order) {
    header[pending->name] = {{"dtype", pending->dtype_name},
                             {"shape", pending->shape},
                             {"data_offsets", {offset, offset + pending->bytes.size()}}};
    offset += pending->bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned

  std::vector<std::uint8_t> out(8 + text.size() + offset);
  std::uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(length >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::size_t at = 8 + text.size();
  for (const Pending* pending : order) {
    if (!pending->bytes.empty()) std::memcpy(out.data() + at, pending->bytes.data(), pending->bytes.size());
    at += pending->bytes.size();
  }
  return out;
}

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  const auto bytes = serialize();
  write_file_atomically(path, {reinterpret_cast<const char*>(bytes.data()), bytes.size()});
}

void write_safetensors_index(const std::filesystem::path& path, const std::map<std::string, std::string>& weight_map,
                             std::uint64_t total_size) {
  const json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  write_file_atomically(path, {text.data(), text.size()});
}

}  // namespace deepinfer::io
