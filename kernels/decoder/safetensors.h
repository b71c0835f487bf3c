// Reading (and, for tests and tools, writing) Hugging Face safetensors files.
//
// Format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets":
// [begin, end]}, "__metadata__": {...}}, then the raw little-endian data;
// offsets are relative to the end of the header.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace servesim {

// F8_E4M3: FP8 e4m3 (kernels/decoder/fp8_e4m3.h), as FP8 checkpoints store
// their linear layers beside fp32 `weight_scale` tensors.
enum class SafetensorsDtype { F32, F16, BF16, F8_E4M3 };

struct TensorInfo {
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets in the data section
  int64_t numel() const;
};

// One .safetensors file, read into memory. Throws InputError naming the file
// (and the tensor) for: a missing or unreadable file, a file shorter than 8
// bytes, a header length past the end of the file, invalid header JSON, an
// unsupported dtype, a shape whose element count disagrees with its byte
// range, offsets past the end of the data or overlapping.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  const TensorInfo& info(const std::string& name) const;  // InputError if missing
  std::vector<std::string> names() const;

  // The tensor converted to fp32, after checking its shape equals `expected`
  // (InputError naming file, tensor, expected and actual shapes otherwise).
  std::vector<float> read_f32(const std::string& name, const std::vector<int64_t>& expected) const;

 private:
  std::string path_;
  std::map<std::string, TensorInfo> tensors_;
  std::vector<uint8_t> data_;  // the data section
};

// A model's weights: one model.safetensors, or the shards listed by
// model.safetensors.index.json ({"weight_map": {tensor: shard file}}).
class SafetensorsModel {
 public:
  // `dir` holds model.safetensors or model.safetensors.index.json.
  explicit SafetensorsModel(const std::string& dir);

  bool has(const std::string& name) const;
  // InputError naming the file and tensor when it is missing or its shape
  // differs from `expected`.
  std::vector<float> read_f32(const std::string& name, const std::vector<int64_t>& expected) const;
  // The tensor's header entry and the file holding it (InputError if missing).
  const TensorInfo& info(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;

 private:
  std::string dir_;
  std::string source_;  // the index file or the single file: named in "missing tensor" errors
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t> shard_of_;  // tensor -> index into shards_
};

// Writes tensors (given in fp32) to a .safetensors file in `dtype` (bf16 and
// f16 round to nearest even). For tests, tools and the numpy oracle.
struct TensorToWrite {
  TensorToWrite(std::string name_, std::vector<int64_t> shape_, std::vector<float> values_,
                std::optional<SafetensorsDtype> dtype_ = std::nullopt)
      : name(std::move(name_)), shape(std::move(shape_)), values(std::move(values_)), dtype(dtype_) {}
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::optional<SafetensorsDtype> dtype;  // this tensor's, when not the file's
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       SafetensorsDtype dtype);

// Scalar conversions (exact for bf16/f16 -> f32; round-to-nearest-even back).
float bf16_to_f32(uint16_t v);
uint16_t f32_to_bf16(float v);
float f16_to_f32(uint16_t v);
uint16_t f32_to_f16(float v);

}  // namespace servesim
