// NumPy .npy reader and writer (see npy.hpp). The format: "\x93NUMPY", major and minor version, a
// little-endian header length (2 bytes in 1.0, 4 in 2.0/3.0), then a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (N, C, H, W), } padded with spaces to 64 bytes.
#include "data/npy.hpp"

#include <cstring>
#include <fstream>
#include <limits>

#include "core/dtype.hpp"
#include "core/errors.hpp"
#include "data/file_io.hpp"

namespace cnnergy::data {
namespace {

constexpr std::uint8_t kMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr std::size_t kMaxRank = 8;

[[noreturn]] void fail(const std::string& name, const std::string& why) {
  throw DataError("NumPy file " + name + ": " + why);
}

// The value after 'key': in the header dict, as raw text up to the matching end.
std::string field(const std::string& header, const std::string& key, const std::string& name) {
  const std::string quoted[] = {"'" + key + "'", "\"" + key + "\""};
  std::size_t at = std::string::npos;
  for (const auto& q : quoted)
    if ((at = header.find(q)) != std::string::npos) {
      at += q.size();
      break;
    }
  if (at == std::string::npos) fail(name, "header has no '" + key + "' entry");
  at = header.find(':', at);
  if (at == std::string::npos) fail(name, "header entry '" + key + "' has no value");
  ++at;
  while (at < header.size() && header[at] == ' ') ++at;
  if (at >= header.size()) fail(name, "header entry '" + key + "' has no value");
  if (header[at] == '(') {
    const auto end = header.find(')', at);
    if (end == std::string::npos) fail(name, "unterminated shape tuple");
    return header.substr(at, end - at + 1);
  }
  if (header[at] == '\'' || header[at] == '"') {
    const auto end = header.find(header[at], at + 1);
    if (end == std::string::npos) fail(name, "unterminated string in '" + key + "'");
    return header.substr(at + 1, end - at - 1);
  }
  auto end = header.find_first_of(",}", at);
  if (end == std::string::npos) end = header.size();
  std::string v = header.substr(at, end - at);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}

std::vector<std::int64_t> parse_shape(const std::string& tuple, const std::string& name) {
  std::vector<std::int64_t> dims;
  std::size_t i = 1;  // after '('
  while (i < tuple.size()) {
    while (i < tuple.size() && (tuple[i] == ' ' || tuple[i] == ',')) ++i;
    if (i >= tuple.size() || tuple[i] == ')') break;
    std::int64_t v = 0;
    bool digits = false;
    while (i < tuple.size() && tuple[i] >= '0' && tuple[i] <= '9') {
      if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) fail(name, "shape dimension too large");
      v = v * 10 + (tuple[i] - '0');
      digits = true;
      ++i;
    }
    if (i < tuple.size() && tuple[i] == 'L') ++i;  // Python 2's long suffix
    if (!digits) fail(name, "shape " + tuple + " is not a tuple of non-negative integers");
    dims.push_back(v);
    if (dims.size() > kMaxRank) fail(name, "shape has more than " + std::to_string(kMaxRank) + " dimensions");
  }
  if (dims.empty()) fail(name, "a 0-dimensional array (shape ()) has no samples");
  return dims;
}

}  // namespace

Tensor parse_npy(std::span<const std::uint8_t> bytes, const std::string& name) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    fail(name, "not a .npy file (no \\x93NUMPY magic)");
  const int major = bytes[6];
  std::size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = bytes[8] | (std::size_t{bytes[9]} << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(name, "truncated header");
    header_len = bytes[8] | (std::size_t{bytes[9]} << 8) | (std::size_t{bytes[10]} << 16) |
                 (std::size_t{bytes[11]} << 24);
    offset = 12;
  } else {
    fail(name, "format version " + std::to_string(major) + "." + std::to_string(bytes[7]) +
                   " is not one of 1.0, 2.0, 3.0");
  }
  if (header_len > bytes.size() - offset) fail(name, "header length runs past the end of the file");
  const std::string header(reinterpret_cast<const char*>(bytes.data() + offset), header_len);
  const std::string descr = field(header, "descr", name);
  const std::string fortran = field(header, "fortran_order", name);
  if (fortran != "False") fail(name, "Fortran-ordered arrays are not supported (save with np.ascontiguousarray)");
  const auto dims = parse_shape(field(header, "shape", name), name);
  std::size_t elem = 0;
  if (descr == "<f4" || descr == "=f4" || descr == "|f4")
    elem = 4;
  else if (descr == "<f8" || descr == "=f8")
    elem = 8;
  else if (descr == "<f2" || descr == "=f2")
    elem = 2;
  else
    fail(name, "dtype '" + descr + "' is not supported (float32, float64 or float16, little-endian)");
  std::uint64_t count = 1;
  for (auto d : dims) {
    if (d > 0 && count > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d))
      fail(name, "shape overflows");
    count *= static_cast<std::uint64_t>(d);
  }
  const std::size_t data_at = offset + header_len;
  const std::size_t available = bytes.size() - data_at;
  if (count == 0) fail(name, "the array is empty (a dimension is 0)");
  if (count > available / elem || count * elem != available)
    fail(name, "shape needs " + std::to_string(count) + " x " + std::to_string(elem) + " bytes of data, the file has " +
                   std::to_string(available));
  Tensor t = Tensor::host(Shape(std::vector<std::int64_t>(dims.begin(), dims.end())));
  auto out = t.f32();
  const std::uint8_t* p = bytes.data() + data_at;
  for (std::size_t i = 0; i < count; ++i) {
    if (elem == 4) {
      std::memcpy(&out[i], p + 4 * i, 4);
    } else if (elem == 8) {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      out[i] = static_cast<float>(v);
    } else {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = half_bits_to_float(h);
    }
  }
  return t;
}

Tensor read_npy(const std::filesystem::path& path) {
  const auto bytes = read_file_bytes(path);
  return parse_npy(bytes, path.string());
}

void write_npy(const std::filesystem::path& path, const Tensor& host_f32) {
  if (host_f32.dtype() != DType::kF32) throw InvalidArgument("write_npy takes fp32 tensors");
  std::string shape = "(";  // Python's tuple syntax: (7,) for one dimension, (2, 3) for more
  const auto& dims = host_f32.shape().dims();
  for (std::size_t i = 0; i < dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(dims[i]);
  shape += dims.size() == 1 ? ",)" : ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw DataError("cannot write " + tmp);
    out.write(reinterpret_cast<const char*>(kMagic), sizeof kMagic);
    const char version[2] = {1, 0};
    out.write(version, 2);
    const std::uint16_t len = static_cast<std::uint16_t>(header.size());
    const char len_le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
    out.write(len_le, 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(host_f32.raw()), static_cast<std::streamsize>(host_f32.size_bytes()));
    if (!out.flush()) throw DataError("cannot write " + tmp + " (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw DataError("cannot rename " + tmp + " to " + path.string() + ": " + ec.message());
}

}  // namespace cnnergy::data
