// Safetensors reading: header validation (format rules of the reference implementation), mapped
// files with zero-copy views, and checkpoints spread over several files.
#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "common/error.h"
#include "common/logging.h"
#include "io/file_util.h"
#include "io/json_util.h"
#include "io/mapped_file.h"

namespace deepinfer::io {
namespace {

using json = nlohmann::json;

std::uint64_t read_u64_le(const std::uint8_t* p) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

// A JSON value as a non-negative integer, or nullopt.
std::optional<std::uint64_t> as_unsigned(const json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(value.get<std::int64_t>());
  return std::nullopt;
}

// Parses the header text, rejecting duplicate keys (nlohmann would silently keep the last one).
json parse_header_json(std::string_view text, std::string_view label) {
  std::string duplicate;
  std::unordered_set<std::string> seen;
  const json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxJsonDepth) throw_error("{}: header JSON nested deeper than {} levels", label, kMaxJsonDepth);
    if (event == json::parse_event_t::key && depth == 1) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    throw_error("{}: header is not valid JSON: {}", label, e.what());
  }
  if (!duplicate.empty()) throw_error("{}: header names tensor '{}' twice", label, duplicate);
  if (!header.is_object()) throw_error("{}: header is not a JSON object but {}", label, header.type_name());
  return header;
}

void parse_metadata(const json& value, std::string_view label, std::map<std::string, std::string>& out) {
  if (!value.is_object()) throw_error("{}: __metadata__ must be an object, got {}", label, value.type_name());
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) throw_error("{}: __metadata__ value of '{}' must be a string, got {}", label, key, item.type_name());
    out[key] = item.get<std::string>();
  }
}

Shape parse_shape(const json& info, const std::string& name, std::string_view label, std::uint64_t& numel) {
  const auto it = info.find("shape");
  if (it == info.end()) throw_error("{}: tensor '{}' has no shape", label, name);
  if (!it->is_array()) throw_error("{}: tensor '{}': shape must be an array, got {}", label, name, it->type_name());
  if (it->size() > static_cast<std::size_t>(Shape::kMaxDims))
    throw_error("{}: tensor '{}': shape has {} dimensions, at most {} are supported", label, name, it->size(), Shape::kMaxDims);
  Shape shape;
  numel = 1;
  for (const auto& extent : *it) {
    const auto value = as_unsigned(extent);
    if (!value || *value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw_error("{}: tensor '{}': shape entries must be non-negative integers, got {}", label, name, extent.dump());
    if (__builtin_mul_overflow(numel, *value, &numel))
      throw_error("{}: tensor '{}': shape {} has more elements than fit in 64 bits", label, name, it->dump());
    shape.push_back(static_cast<std::int64_t>(*value));
  }
  return shape;
}

SafetensorsEntry parse_entry(const std::string& name, const json& info, std::string_view label) {
  if (!info.is_object()) throw_error("{}: tensor '{}': expected an object, got {}", label, name, info.type_name());
  SafetensorsEntry entry;
  entry.name = name;
  const auto dtype_it = info.find("dtype");
  if (dtype_it == info.end()) throw_error("{}: tensor '{}' has no dtype", label, name);
  if (!dtype_it->is_string()) throw_error("{}: tensor '{}': dtype must be a string, got {}", label, name, dtype_it->dump());
  entry.dtype_name = dtype_it->get<std::string>();
  const auto dtype = safetensors_dtype(entry.dtype_name);
  if (!dtype) throw_error("{}: tensor '{}': unknown dtype '{}'", label, name, entry.dtype_name);
  entry.dtype = *dtype;

  std::uint64_t numel = 0;
  entry.shape = parse_shape(info, name, label, numel);
  const auto bits = static_cast<std::uint64_t>(dtype_bits(entry.dtype));
  std::uint64_t total_bits = 0;
  if (__builtin_mul_overflow(numel, bits, &total_bits))
    throw_error("{}: tensor '{}': shape {} is too large", label, name, entry.shape);
  if (total_bits % 8 != 0 || (entry.dtype == DType::kF4E2M1 && entry.shape.ndim() > 0 && entry.shape[-1] % 2 != 0))
    throw_error("{}: tensor '{}': {} values of shape {} do not fill whole bytes", label, name, entry.dtype_name, entry.shape);

  const auto offsets_it = info.find("data_offsets");
  if (offsets_it == info.end()) throw_error("{}: tensor '{}' has no data_offsets", label, name);
  const json& offsets = *offsets_it;
  if (!offsets.is_array() || offsets.size() != 2 || !as_unsigned(offsets[0]) || !as_unsigned(offsets[1]))
    throw_error("{}: tensor '{}': data_offsets must be two non-negative integers, got {}", label, name, offsets.dump());
  entry.begin = *as_unsigned(offsets[0]);
  entry.end = *as_unsigned(offsets[1]);
  if (entry.end < entry.begin)
    throw_error("{}: tensor '{}': data_offsets [{}, {}] end before they begin", label, name, entry.begin, entry.end);
  if (entry.nbytes() != total_bits / 8)
    throw_error("{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but {} {} needs {}", label, name, entry.begin,
                entry.end, entry.nbytes(), entry.dtype_name, entry.shape, total_bits / 8);
  return entry;
}

// The entries' byte ranges must tile [0, data_size): sorted by offset, each starts where the
// previous one ended (the reference implementation's rule), and the last ends at the buffer's end.
void check_tiling(std::vector<SafetensorsEntry>& entries, std::uint64_t data_size, std::string_view label) {
  for (const auto& entry : entries) {
    if (entry.end > data_size)
      throw_error("{}: tensor '{}': data_offsets [{}, {}] run past the end of the data ({} bytes)", label, entry.name,
                  entry.begin, entry.end, data_size);
  }
  std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const auto& entry : entries) {
    if (entry.begin < expected)
      throw_error("{}: tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (bytes [{}, {}))", label, entry.name, entry.begin,
                  entry.end, previous->name, previous->begin, previous->end);
    if (entry.begin > expected)
      throw_error("{}: bytes [{}, {}) before tensor '{}' belong to no tensor", label, expected, entry.begin, entry.name);
    expected = entry.end;
    previous = &entry;
  }
  if (expected != data_size)
    throw_error("{}: {} bytes after the last tensor belong to no tensor", label, data_size - expected);
}

}  // namespace

std::optional<DType> safetensors_dtype(std::string_view name) {
  if (name == "F4" || name == "F4_E2M1") return DType::kF4E2M1;
  if (name == "F8_E8M0" || name == "F8_E8M0FNU" || name == "E8M0") return DType::kUE8M0;
  return dtype_from_safetensors_name(name);
}

const SafetensorsEntry* SafetensorsHeader::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries[it->second];
}

SafetensorsHeader parse_safetensors_header(std::span<const std::uint8_t> file, std::string_view file_label) {
  if (file.size() < 8)
    throw_error("{}: not a safetensors file: {} bytes, too short for the 8-byte header length", file_label, file.size());
  const std::uint64_t header_length = read_u64_le(file.data());
  if (header_length > kMaxSafetensorsHeaderBytes)
    throw_error("{}: header length {} exceeds the {}-byte limit (corrupt or not a safetensors file)", file_label,
                header_length, kMaxSafetensorsHeaderBytes);
  if (header_length > file.size() - 8)
    throw_error("{}: header length {} runs past the end of the file ({} bytes)", file_label, header_length, file.size());

  SafetensorsHeader header;
  header.data_offset = 8 + header_length;
  header.data_size = file.size() - header.data_offset;
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), header_length);
  const json root = parse_header_json(text, file_label);
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      parse_metadata(value, file_label, header.metadata);
      continue;
    }
    header.entries.push_back(parse_entry(key, value, file_label));
  }
  check_tiling(header.entries, header.data_size, file_label);
  header.index_.reserve(header.entries.size());
  for (std::size_t i = 0; i < header.entries.size(); ++i) header.index_.emplace(header.entries[i].name, i);
  return header;
}

// ---- SafetensorsFile ----------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(std::filesystem::path path, std::shared_ptr<const MappedFile> mapping,
                                 SafetensorsHeader header)
    : path_(std::move(path)), mapping_(std::move(mapping)), header_(std::move(header)) {}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  auto mapping = MappedFile::open(path);
  auto header = parse_safetensors_header(mapping->bytes(), path.string());
  return std::make_shared<const SafetensorsFile>(path, std::move(mapping), std::move(header));
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(header_.entries.size());
  for (const auto& entry : header_.entries) out.push_back(entry.name);
  return out;
}

Tensor SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsEntry* entry = header_.find(name);
  if (entry == nullptr) throw_error("{}: no tensor named '{}'", path_.string(), name);
  return tensor(*entry);
}

Tensor SafetensorsFile::tensor(const SafetensorsEntry& entry) const {
  const std::uint8_t* data = mapping_->data() + header_.data_offset + entry.begin;
  const std::size_t element = std::max<std::size_t>(1, static_cast<std::size_t>(dtype_bits(entry.dtype)) / 8);
  if (reinterpret_cast<std::uintptr_t>(data) % element != 0) {
    log::debug("{}: tensor '{}' is not {}-byte aligned in the file; copying it", path_.string(), entry.name, element);
    Tensor copy = Tensor::empty(entry.shape, entry.dtype);
    std::memcpy(copy.raw_data(), data, entry.nbytes());
    return copy;
  }
  // The mapping is read-only; Tensor's interface is not const-typed, so views must not be written.
  return Tensor::view_of(const_cast<std::uint8_t*>(data), entry.shape, entry.dtype, mapping_);
}

// ---- ShardedSafetensors ---------------------------------------------------------------------------

void ShardedSafetensors::add_file(std::shared_ptr<const SafetensorsFile> file, const std::vector<std::string>* only) {
  const std::size_t file_index = files_.size();
  files_.push_back(file);
  const auto add = [&](const SafetensorsEntry& entry) {
    const auto [it, inserted] = where_.emplace(entry.name, Location{file_index, &entry});
    if (!inserted)
      throw_error("tensor '{}' is stored twice: in {} and in {}", entry.name, files_[it->second.file]->path().string(),
                  file->path().string());
  };
  if (only == nullptr) {
    for (const auto& entry : file->header().entries) add(entry);
    return;
  }
  for (const auto& name : *only) {
    const SafetensorsEntry* entry = file->header().find(name);
    if (entry == nullptr)
      throw_error("{}: tensor '{}' is listed in shard {} but that file does not contain it", index_path_.string(), name,
                  file->path().filename().string());
    add(*entry);
  }
  if (only->size() != file->header().entries.size())
    log::debug("{}: {} tensors not listed in the index are ignored", file->path().string(),
               file->header().entries.size() - only->size());
}

ShardedSafetensors ShardedSafetensors::open_files(const std::vector<std::filesystem::path>& files) {
  ShardedSafetensors out;
  for (const auto& path : files) out.add_file(SafetensorsFile::open(path), nullptr);
  return out;
}

ShardedSafetensors ShardedSafetensors::open(const std::filesystem::path& directory) {
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec)) throw_error("{}: not a directory", directory.string());
  const auto index_path = directory / "model.safetensors.index.json";
  if (std::filesystem::exists(index_path, ec)) {
    const std::string label = index_path.string();
    const json index = parse_json(read_text_file(index_path), label);
    if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object())
      throw_error("{}: expected an object with a \"weight_map\" object", label);
    std::map<std::string, std::vector<std::string>> by_shard;
    for (const auto& [name, shard] : index.at("weight_map").items()) {
      if (!shard.is_string()) throw_error("{}: weight_map entry of '{}' must be a file name, got {}", label, name, shard.dump());
      const auto file = shard.get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
        throw_error("{}: tensor '{}': shard '{}' is not a file name inside the checkpoint directory", label, name, file);
      by_shard[file].push_back(name);
    }
    if (by_shard.empty()) throw_error("{}: weight_map lists no tensors", label);
    ShardedSafetensors out;
    out.index_path_ = index_path;
    for (const auto& [file, names] : by_shard) {
      const auto path = directory / file;
      if (!std::filesystem::exists(path, ec))
        throw_error("{}: shard {} (holding '{}' and {} more tensors) does not exist", label, file, names.front(),
                    names.size() - 1);
      out.add_file(SafetensorsFile::open(path), &names);
    }
    return out;
  }
  if (std::filesystem::exists(directory / "model.safetensors", ec)) return open_files({directory / "model.safetensors"});
  std::vector<std::filesystem::path> files;
  for (const auto& item : std::filesystem::directory_iterator(directory, ec))
    if (item.path().extension() == ".safetensors") files.push_back(item.path());
  if (files.empty())
    throw_error("{}: no safetensors files (expected model.safetensors or model.safetensors.index.json)", directory.string());
  std::sort(files.begin(), files.end());
  return open_files(files);
}

const ShardedSafetensors::Location& ShardedSafetensors::locate(std::string_view name) const {
  const auto it = where_.find(std::string(name));
  if (it == where_.end()) throw_error("no tensor named '{}' in the checkpoint", name);
  return it->second;
}

Tensor ShardedSafetensors::tensor(std::string_view name) const {
  const Location& at = locate(name);
  return files_[at.file]->tensor(*at.entry);
}

const SafetensorsEntry& ShardedSafetensors::entry(std::string_view name) const { return *locate(name).entry; }

const std::filesystem::path& ShardedSafetensors::file_of(std::string_view name) const {
  return files_[locate(name).file]->path();
}

std::vector<std::string> ShardedSafetensors::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, location] : where_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace deepinfer::io
