#include "kernels/decoder/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "kernels/decoder/fp8_e4m3.h"
#include "sim/errors.h"

namespace servesim {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSupportedDtypes = "F32, F16, BF16, F8_E4M3";

const char* dtype_name(SafetensorsDtype d) {
  switch (d) {
    case SafetensorsDtype::F32: return "F32";
    case SafetensorsDtype::F16: return "F16";
    case SafetensorsDtype::BF16: return "BF16";
    case SafetensorsDtype::F8_E4M3: return "F8_E4M3";
  }
  return "?";
}

uint64_t dtype_size(SafetensorsDtype d) {
  return d == SafetensorsDtype::F32 ? 4 : d == SafetensorsDtype::F8_E4M3 ? 1 : 2;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// A JSON value for an error message. Only scalars are printed in full (dump()
// recurses, and a fuzzed header may nest deeply); anything else by its type.
std::string describe(const json& v) {
  auto scalar = [](const json& x) {
    std::string s = x.dump();
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
  };
  if (v.is_primitive()) return scalar(v);
  if (v.is_array() && v.size() <= 4 &&
      std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_primitive(); })) {
    std::vector<std::string> parts;
    for (const json& x : v) parts.push_back(scalar(x));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }
  return fmt::format("a JSON {}", v.type_name());
}

// A non-negative integer that fits in int64 (JSON may hold unsigned values
// above INT64_MAX, negatives and floats: none of those qualify).
bool as_nonneg_int(const json& v, int64_t& out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if (i < 0) return false;
    out = i;
    return true;
  }
  return false;
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void put_le16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v & 0xFF));
  out.push_back(static_cast<uint8_t>(v >> 8));
}

void put_le32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>((v >> (8 * i)) & 0xFF));
}

// Parses one tensor entry of the header; `where` is "FILE: tensor 'NAME'".
TensorInfo parse_tensor(const json& entry, const std::string& where, uint64_t data_size) {
  if (!entry.is_object())
    throw InputError(fmt::format("{}: the header entry must be a JSON object with dtype, shape "
                                 "and data_offsets (got {})",
                                 where, describe(entry)));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key))
      throw InputError(fmt::format("{}: missing field '{}'", where, key));

  TensorInfo t;
  const json& dt = entry.at("dtype");
  if (!dt.is_string())
    throw InputError(fmt::format("{}: field 'dtype' must be a string, one of {} (got {})", where,
                                 kSupportedDtypes, describe(dt)));
  const auto& dts = dt.get_ref<const std::string&>();
  if (dts == "F32") t.dtype = SafetensorsDtype::F32;
  else if (dts == "F16") t.dtype = SafetensorsDtype::F16;
  else if (dts == "BF16") t.dtype = SafetensorsDtype::BF16;
  else if (dts == "F8_E4M3") t.dtype = SafetensorsDtype::F8_E4M3;
  else
    throw InputError(fmt::format("{}: unsupported dtype '{}' (supported: {})", where, dts,
                                 kSupportedDtypes));

  const json& sh = entry.at("shape");
  if (!sh.is_array())
    throw InputError(fmt::format("{}: field 'shape' must be an array of non-negative integers "
                                 "(got {})",
                                 where, describe(sh)));
  uint64_t numel = 1;
  bool numel_overflow = false;
  for (const json& d : sh) {
    int64_t dim = 0;
    if (!as_nonneg_int(d, dim))
      throw InputError(fmt::format("{}: field 'shape' must hold non-negative integers (got {})",
                                   where, describe(d)));
    t.shape.push_back(dim);
    const auto ud = static_cast<uint64_t>(dim);
    if (ud != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / ud) numel_overflow = true;
    else numel *= ud;
  }
  if (std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end()) {
    numel = 0;
    numel_overflow = false;
  }

  const json& off = entry.at("data_offsets");
  int64_t b = 0, e = 0;
  if (!off.is_array() || off.size() != 2 || !as_nonneg_int(off[0], b) || !as_nonneg_int(off[1], e))
    throw InputError(fmt::format("{}: field 'data_offsets' must be [begin, end], two non-negative "
                                 "integers (got {})",
                                 where, describe(off)));
  t.begin = static_cast<uint64_t>(b);
  t.end = static_cast<uint64_t>(e);
  if (t.begin > t.end)
    throw InputError(fmt::format("{}: data_offsets [{}, {}] must have begin <= end", where,
                                 t.begin, t.end));
  if (t.end > data_size)
    throw InputError(fmt::format("{}: data_offsets [{}, {}] point past the end of the data ({} "
                                 "bytes) — the file may be truncated",
                                 where, t.begin, t.end, data_size));
  const uint64_t bytes = t.end - t.begin;
  if (numel_overflow || numel * dtype_size(t.dtype) != bytes)
    throw InputError(fmt::format(
        "{}: shape {} ({} elements of {}, {} bytes) disagrees with data_offsets [{}, {}] ({} "
        "bytes)",
        where, shape_str(t.shape),
        numel_overflow ? std::string("too many") : std::to_string(numel), dtype_name(t.dtype),
        numel_overflow ? std::string("too many") : std::to_string(numel * dtype_size(t.dtype)),
        t.begin, t.end, bytes));
  return t;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------
// Scalar conversions

float bf16_to_f32(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

uint16_t f32_to_bf16(float v) {
  const auto x = std::bit_cast<uint32_t>(v);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u)  // NaN: keep sign and top payload, force quiet
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  // Round to nearest, ties to even; overflow rounds to infinity as IEEE says.
  const uint32_t rounded = x + 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

float f16_to_f32(uint16_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x8000u) << 16;
  const uint32_t exp = (v >> 10) & 0x1Fu;
  uint32_t mant = v & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf, or NaN with its payload
  } else if (exp != 0) {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: mant * 2^-24. Normalise so the leading 1 becomes implicit.
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    // value = 1.f * 2^(-14 - 1 - e)
    bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float v) {
  const auto x = std::bit_cast<uint32_t>(v);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u)  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u)  // >= 65520 (halfway past 65504, ties to even = up): inf
    return static_cast<uint16_t>(sign | 0x7C00u);
  if (a >= 0x38800000u) {  // normal half (>= 2^-14)
    const uint32_t adj = a - 0x38000000u;  // rebias exponent 127 -> 15
    uint32_t r = adj >> 13;
    const uint32_t rem = adj & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // may carry into the exponent
    return static_cast<uint16_t>(sign | r);
  }
  if (a <= 0x33000000u)  // <= 2^-25 (half the smallest subnormal; the tie goes to 0)
    return sign;
  // Subnormal half: value / 2^-24 = m * 2^(e - 126) with m the 24-bit significand.
  const uint32_t e = a >> 23;  // 102..112 here
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t r = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;  // 0x400 is the smallest normal: fine
  return static_cast<uint16_t>(sign | r);
}

// ---------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    throw InputError(fmt::format("{}: cannot open safetensors file (it does not exist)", path));
  if (fs::is_directory(status))
    throw InputError(fmt::format("{}: is a directory, not a safetensors file", path));

  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open safetensors file for reading", path));
  in.seekg(0, std::ios::end);
  const std::streamoff end_pos = in.tellg();
  if (end_pos < 0) throw InputError(fmt::format("{}: cannot determine the file size", path));
  const auto file_size = static_cast<uint64_t>(end_pos);
  in.seekg(0, std::ios::beg);

  if (file_size < 8)
    throw InputError(fmt::format("{}: file is {} bytes, too short for the 8-byte header length "
                                 "of a safetensors file",
                                 path, file_size));
  unsigned char len_bytes[8];
  if (!in.read(reinterpret_cast<char*>(len_bytes), 8))
    throw InputError(fmt::format("{}: cannot read the 8-byte header length", path));
  const uint64_t header_len = read_le64(len_bytes);
  if (header_len > file_size - 8)
    throw InputError(fmt::format("{}: header of {} bytes runs past the end of the file ({} bytes)",
                                 path, header_len, file_size));

  std::string header(static_cast<size_t>(header_len), '\0');
  if (header_len > 0 && !in.read(header.data(), static_cast<std::streamsize>(header_len)))
    throw InputError(fmt::format("{}: cannot read the {}-byte header", path, header_len));
  const uint64_t data_size = file_size - 8 - header_len;
  data_.resize(static_cast<size_t>(data_size));
  if (data_size > 0 &&
      !in.read(reinterpret_cast<char*>(data_.data()), static_cast<std::streamsize>(data_size)))
    throw InputError(fmt::format("{}: cannot read the {}-byte data section", path, data_size));

  json j;
  try {
    j = json::parse(header);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: the safetensors header is not valid JSON ({})", path,
                                 e.what()));
  }
  if (!j.is_object())
    throw InputError(fmt::format("{}: the safetensors header must be a JSON object of tensors "
                                 "(got {})",
                                 path, describe(j)));

  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") continue;
    tensors_.emplace(name, parse_tensor(entry, fmt::format("{}: tensor '{}'", path, name),
                                        data_size));
  }

  // No two tensors may share bytes (empty tensors hold none, so never clash).
  std::vector<std::pair<const std::string*, const TensorInfo*>> by_offset;
  for (const auto& [name, t] : tensors_)
    if (t.end > t.begin) by_offset.emplace_back(&name, &t);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto& [pn, pt] = by_offset[i - 1];
    const auto& [cn, ct] = by_offset[i];
    if (ct->begin < pt->end)
      throw InputError(fmt::format("{}: tensor '{}' (data_offsets [{}, {}]) overlaps tensor '{}' "
                                   "(data_offsets [{}, {}])",
                                   path, *cn, ct->begin, ct->end, *pn, pt->begin, pt->end));
  }
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw InputError(fmt::format("{}: missing tensor '{}'", path_, name));
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name,
                                             const std::vector<int64_t>& expected) const {
  const TensorInfo& t = info(name);
  if (t.shape != expected)
    throw InputError(fmt::format("{}: tensor '{}' has shape {} but config.json implies {}", path_,
                                 name, shape_str(t.shape), shape_str(expected)));
  const auto n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  const uint8_t* p = data_.data() + t.begin;
  switch (t.dtype) {
    case SafetensorsDtype::F32:
      for (size_t i = 0; i < n; ++i, p += 4) {
        const uint32_t u = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                           (static_cast<uint32_t>(p[2]) << 16) |
                           (static_cast<uint32_t>(p[3]) << 24);
        out[i] = std::bit_cast<float>(u);
      }
      break;
    case SafetensorsDtype::F16:
      for (size_t i = 0; i < n; ++i, p += 2)
        out[i] = f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
      break;
    case SafetensorsDtype::BF16:
      for (size_t i = 0; i < n; ++i, p += 2)
        out[i] = bf16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
      break;
    case SafetensorsDtype::F8_E4M3:
      for (size_t i = 0; i < n; ++i, ++p) out[i] = e4m3_to_f32(*p);
      break;
  }
  return out;
}

// ---------------------------------------------------------------------------
// SafetensorsModel

SafetensorsModel::SafetensorsModel(const std::string& dir) : dir_(dir) {
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  std::error_code ec;

  if (fs::exists(index_path, ec)) {
    source_ = index_path.string();
    std::ifstream in(index_path);
    if (!in) throw InputError(fmt::format("{}: cannot open for reading", source_));
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      throw InputError(fmt::format("{}: not valid JSON ({})", source_, e.what()));
    }
    if (!j.is_object() || !j.contains("weight_map"))
      throw InputError(fmt::format("{}: missing field 'weight_map' (an object mapping each tensor "
                                   "to its shard file)",
                                   source_));
    const json& wm = j.at("weight_map");
    if (!wm.is_object())
      throw InputError(fmt::format("{}: field 'weight_map' must be an object mapping each tensor "
                                   "to its shard file (got {})",
                                   source_, describe(wm)));
    if (wm.empty())
      throw InputError(fmt::format("{}: field 'weight_map' lists no tensors", source_));

    std::map<std::string, size_t> shard_index;  // shard file name -> index into shards_
    for (const auto& [tensor, shard] : wm.items()) {
      if (!shard.is_string() || shard.get_ref<const std::string&>().empty())
        throw InputError(fmt::format("{}: weight_map['{}'] must be a shard file name (got {})",
                                     source_, tensor, describe(shard)));
      const auto& shard_name = shard.get_ref<const std::string&>();
      auto it = shard_index.find(shard_name);
      if (it == shard_index.end()) {
        const fs::path shard_path = fs::path(dir) / shard_name;
        if (!fs::is_regular_file(shard_path, ec))
          throw InputError(fmt::format("{}: shard '{}' (holding tensor '{}') does not exist at {}",
                                       source_, shard_name, tensor, shard_path.string()));
        shards_.emplace_back(shard_path.string());
        it = shard_index.emplace(shard_name, shards_.size() - 1).first;
      }
      if (!shards_[it->second].has(tensor))
        throw InputError(fmt::format("{}: tensor '{}' is mapped to shard '{}', but {} has no such "
                                     "tensor",
                                     source_, tensor, shard_name, shards_[it->second].path()));
      shard_of_.emplace(tensor, it->second);
    }
    return;
  }

  if (fs::exists(single_path, ec)) {
    source_ = single_path.string();
    shards_.emplace_back(source_);
    for (const auto& name : shards_.front().names()) shard_of_.emplace(name, 0);
    return;
  }

  throw InputError(fmt::format("{}: no model.safetensors or model.safetensors.index.json", dir));
}

bool SafetensorsModel::has(const std::string& name) const { return shard_of_.count(name) > 0; }

std::vector<float> SafetensorsModel::read_f32(const std::string& name,
                                              const std::vector<int64_t>& expected) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end())
    throw InputError(fmt::format("{}: missing tensor '{}'", source_, name));
  return shards_[it->second].read_f32(name, expected);
}

const TensorInfo& SafetensorsModel::info(const std::string& name) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) throw InputError(fmt::format("{}: missing tensor '{}'", source_, name));
  return shards_[it->second].info(name);
}

const std::string& SafetensorsModel::file_of(const std::string& name) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) throw InputError(fmt::format("{}: missing tensor '{}'", source_, name));
  return shards_[it->second].path();
}

// ---------------------------------------------------------------------------
// Writing

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       SafetensorsDtype dtype) {
  std::set<std::string> seen;
  std::string header = "{";
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__" || !seen.insert(t.name).second)
      throw InputError(fmt::format("{}: cannot write tensor '{}': the name is {}", path, t.name,
                                   t.name == "__metadata__" ? "reserved" : "used twice"));
    const bool empty = std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end();
    uint64_t numel = empty ? 0 : 1;
    for (int64_t d : t.shape) {
      if (empty && d >= 0) continue;
      if (d < 0)
        throw InputError(fmt::format("{}: cannot write tensor '{}': shape {} has a negative "
                                     "dimension",
                                     path, t.name, shape_str(t.shape)));
      if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / static_cast<uint64_t>(d))
        throw InputError(fmt::format("{}: cannot write tensor '{}': shape {} is too large", path,
                                     t.name, shape_str(t.shape)));
      numel *= static_cast<uint64_t>(d);
    }
    if (numel != t.values.size())
      throw InputError(fmt::format("{}: cannot write tensor '{}': shape {} holds {} elements but "
                                   "{} values were given",
                                   path, t.name, shape_str(t.shape), numel, t.values.size()));
    if (header.size() > 1) header += ',';
    const SafetensorsDtype type = t.dtype.value_or(dtype);
    const uint64_t bytes = numel * dtype_size(type);
    header += fmt::format("{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          json(t.name).dump(), dtype_name(type), fmt::join(t.shape, ","), offset,
                          offset + bytes);
    offset += bytes;
  }
  header += '}';
  while (header.size() % 8 != 0) header += ' ';

  std::vector<uint8_t> data;
  data.reserve(static_cast<size_t>(offset));
  for (const auto& t : tensors)
    for (float v : t.values) switch (t.dtype.value_or(dtype)) {
        case SafetensorsDtype::F32: put_le32(data, std::bit_cast<uint32_t>(v)); break;
        case SafetensorsDtype::F16: put_le16(data, f32_to_f16(v)); break;
        case SafetensorsDtype::BF16: put_le16(data, f32_to_bf16(v)); break;
        case SafetensorsDtype::F8_E4M3: data.push_back(f32_to_e4m3(v)); break;
      }

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError(fmt::format("{}: cannot open for writing", path));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((header.size() >> (8 * i)) & 0xFF);
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  out.flush();
  if (!out) throw InputError(fmt::format("{}: write failed", path));
}

}  // namespace servesim
