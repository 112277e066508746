// Reading ONNX TensorProtos into host constants: every numeric data type, raw or typed storage,
// and external data files bounded to the model's folder.
#include "net/onnx/onnx_tensor.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/dtype.hpp"
#include "core/errors.hpp"

namespace cnnergy::onnx_import {
namespace {

using onnx::TensorProto;
constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;

std::size_t element_size(int type) {
  switch (type) {
    case TensorProto::FLOAT: case TensorProto::INT32: return 4;
    case TensorProto::DOUBLE: case TensorProto::INT64: case TensorProto::UINT64: return 8;
    case TensorProto::FLOAT16: case TensorProto::BFLOAT16: case TensorProto::INT16: case TensorProto::UINT16: return 2;
    case TensorProto::INT8: case TensorProto::UINT8: case TensorProto::BOOL: return 1;
    case TensorProto::UINT32: return 4;
    default: return 0;
  }
}

bool is_float_type(int type) {
  return type == TensorProto::FLOAT || type == TensorProto::DOUBLE || type == TensorProto::FLOAT16 ||
         type == TensorProto::BFLOAT16;
}

template <typename T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Decodes little-endian raw bytes of `type` into out.
void decode_raw(const char* p, std::size_t n, int type, ConstTensor& out) {
  if (type == TensorProto::FLOAT) {
    out.f.resize(n);
    std::memcpy(out.f.data(), p, n * 4);
    return;
  }
  if (is_float_type(type)) {
    out.f.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      switch (type) {
        case TensorProto::DOUBLE: out.f[k] = static_cast<float>(load<double>(p + 8 * k)); break;
        case TensorProto::FLOAT16: out.f[k] = half_bits_to_float(load<std::uint16_t>(p + 2 * k)); break;
        default: out.f[k] = bf16_bits_to_float(load<std::uint16_t>(p + 2 * k)); break;
      }
    }
    return;
  }
  out.i.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    switch (type) {
      case TensorProto::INT64: out.i[k] = load<std::int64_t>(p + 8 * k); break;
      case TensorProto::UINT64: out.i[k] = static_cast<std::int64_t>(load<std::uint64_t>(p + 8 * k)); break;
      case TensorProto::INT32: out.i[k] = load<std::int32_t>(p + 4 * k); break;
      case TensorProto::UINT32: out.i[k] = load<std::uint32_t>(p + 4 * k); break;
      case TensorProto::INT16: out.i[k] = load<std::int16_t>(p + 2 * k); break;
      case TensorProto::UINT16: out.i[k] = load<std::uint16_t>(p + 2 * k); break;
      case TensorProto::INT8: out.i[k] = load<std::int8_t>(p + k); break;
      default: out.i[k] = load<std::uint8_t>(p + k); break;  // UINT8, BOOL
    }
  }
}

std::string read_external(const TensorProto& t, const std::string& model_dir, std::size_t want_bytes) {
  std::string location;
  std::int64_t offset = 0, length = -1;
  for (const auto& e : t.external_data()) {
    try {
      if (e.key() == "location") location = e.value();
      else if (e.key() == "offset") offset = std::stoll(e.value());
      else if (e.key() == "length") length = std::stoll(e.value());
    } catch (const std::exception&) {
      throw DataError("tensor '" + t.name() + "': external data field '" + e.key() + "' is not a number");
    }
  }
  namespace fs = std::filesystem;
  if (location.empty()) throw DataError("tensor '" + t.name() + "' has external data without a location");
  // A NUL would cut the name short at the system call (another file than the one written); control
  // characters name no file a model is exported with. Both are refused rather than interpreted.
  for (const char c : location)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      throw DataError("tensor '" + t.name() + "': external data location holds a NUL or control character (byte " +
                      std::to_string(static_cast<unsigned char>(c)) + "); it must be a plain file name beside the model");
  const fs::path rel(location);
  if (rel.is_absolute()) throw DataError("tensor '" + t.name() + "': external data location '" + location +
                                         "' is absolute; it must be a file beside the model");
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(fs::path(model_dir.empty() ? "." : model_dir), ec);
  const fs::path file = fs::weakly_canonical(dir / rel, ec);
  const std::string dir_s = dir.string() + "/";
  if (ec || file.string().compare(0, dir_s.size(), dir_s) != 0)
    throw DataError("tensor '" + t.name() + "': external data location '" + location +
                    "' leaves the model's folder " + dir.string());
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError("tensor '" + t.name() + "': cannot open external data file " + file.string());
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::int64_t>(in.tellg());
  if (length < 0) length = static_cast<std::int64_t>(want_bytes);
  if (offset < 0 || length != static_cast<std::int64_t>(want_bytes) || offset > size || length > size - offset)
    throw DataError("tensor '" + t.name() + "': external data range (offset " + std::to_string(offset) + ", length " +
                    std::to_string(length) + ") does not fit " + file.string() + " (" + std::to_string(size) +
                    " bytes) or the tensor (" + std::to_string(want_bytes) + " bytes)");
  std::string bytes(static_cast<std::size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  if (!in) throw DataError("tensor '" + t.name() + "': reading external data from " + file.string() + " failed");
  return bytes;
}

}  // namespace

std::int64_t checked_numel(const std::vector<std::int64_t>& dims, const std::string& what) {
  std::int64_t n = 1;
  for (auto d : dims) {
    if (d < 0) throw DataError(what + " has a negative dimension " + std::to_string(d));
    if (d != 0 && n > kMaxElements / d) throw DataError(what + " has more than 2^40 elements");
    n *= d;
  }
  return n;
}

std::int64_t ConstTensor::numel() const { return checked_numel(dims, "a constant"); }

std::vector<std::int64_t> ConstTensor::ints() const {
  if (integer) return i;
  std::vector<std::int64_t> out(f.size());
  for (std::size_t k = 0; k < f.size(); ++k) out[k] = static_cast<std::int64_t>(f[k]);
  return out;
}

ConstTensor ConstTensor::of_ints(std::vector<std::int64_t> values, std::vector<std::int64_t> dims) {
  ConstTensor c;
  c.integer = true;
  c.i = std::move(values);
  c.dims = std::move(dims);
  return c;
}

ConstTensor ConstTensor::of_floats(std::vector<float> values, std::vector<std::int64_t> dims) {
  ConstTensor c;
  c.f = std::move(values);
  c.dims = std::move(dims);
  return c;
}

ConstTensor read_tensor(const TensorProto& t, const std::string& model_dir) {
  ConstTensor out;
  const std::string what = "tensor '" + t.name() + "'";
  out.dims.assign(t.dims().begin(), t.dims().end());
  const std::int64_t n64 = checked_numel(out.dims, what);
  const auto n = static_cast<std::size_t>(n64);
  const int type = t.data_type();
  const std::size_t esize = element_size(type);
  if (esize == 0)
    throw NotSupported(what + " has data type " + std::to_string(type) +
                       " (strings, complex and 8-bit floats are not supported)");
  out.integer = !is_float_type(type);
  if (t.data_location() == TensorProto::EXTERNAL) {
    const std::string bytes = read_external(t, model_dir, n * esize);
    decode_raw(bytes.data(), n, type, out);
    return out;
  }
  if (t.has_raw_data()) {
    if (t.raw_data().size() != n * esize)
      throw DataError(what + " holds " + std::to_string(t.raw_data().size()) + " raw bytes, its shape needs " +
                      std::to_string(n * esize));
    decode_raw(t.raw_data().data(), n, type, out);
    return out;
  }
  auto check = [&](std::size_t have) {
    if (have != n)
      throw DataError(what + " holds " + std::to_string(have) + " values, its shape needs " + std::to_string(n));
  };
  switch (type) {
    case TensorProto::FLOAT:
      check(static_cast<std::size_t>(t.float_data_size()));
      out.f.assign(t.float_data().begin(), t.float_data().end());
      break;
    case TensorProto::DOUBLE:
      check(static_cast<std::size_t>(t.double_data_size()));
      out.f.assign(t.double_data().begin(), t.double_data().end());
      break;
    case TensorProto::INT64:
      check(static_cast<std::size_t>(t.int64_data_size()));
      out.i.assign(t.int64_data().begin(), t.int64_data().end());
      break;
    case TensorProto::UINT64: case TensorProto::UINT32:
      check(static_cast<std::size_t>(t.uint64_data_size()));
      for (auto v : t.uint64_data()) out.i.push_back(static_cast<std::int64_t>(v));
      break;
    default:  // int32_data carries int32, int16, int8, uint16, uint8, bool, fp16 and bf16 bits
      check(static_cast<std::size_t>(t.int32_data_size()));
      if (type == TensorProto::FLOAT16 || type == TensorProto::BFLOAT16) {
        for (auto v : t.int32_data())
          out.f.push_back(type == TensorProto::FLOAT16 ? half_bits_to_float(static_cast<std::uint16_t>(v))
                                                       : bf16_bits_to_float(static_cast<std::uint16_t>(v)));
      } else {
        out.i.assign(t.int32_data().begin(), t.int32_data().end());
      }
  }
  return out;
}

}  // namespace cnnergy::onnx_import
