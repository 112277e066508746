// NumPy .npy reading and writing: round trips, the dtypes and header versions NumPy writes, and every
// kind of malformed file rejected with a DataError naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/dtype.hpp"
#include "core/errors.hpp"
#include "data/npy.hpp"

namespace cnnergy::data {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> npy_bytes(const std::string& dict, const void* data, std::size_t bytes, int major = 1) {
  std::string header = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::vector<std::uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<std::uint8_t>(major), 0};
  const std::size_t n = header.size();
  out.push_back(static_cast<std::uint8_t>(n & 0xff));
  out.push_back(static_cast<std::uint8_t>(n >> 8));
  if (major != 1) {
    out.push_back(0);
    out.push_back(0);
  }
  out.insert(out.end(), header.begin(), header.end());
  const auto* p = static_cast<const std::uint8_t*>(data);
  out.insert(out.end(), p, p + bytes);
  return out;
}

TEST(Npy, WriteThenReadRoundTrips) {
  const fs::path dir = fs::temp_directory_path() / ("cnnergy_npy_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const Shape& shape : {Shape{7}, Shape{2, 3}, Shape{2, 1, 4, 5}}) {
    Tensor t = Tensor::host(shape);
    for (std::size_t i = 0; i < t.f32().size(); ++i) t.f32()[i] = static_cast<float>(i) * 0.5f - 3.0f;
    write_npy(dir / "a.npy", t);
    const Tensor back = read_npy(dir / "a.npy");
    ASSERT_EQ(back.shape(), shape);
    EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.size_bytes()), 0);
    EXPECT_EQ(fs::file_size(dir / "a.npy") % 16, t.size_bytes() % 16);  // header padded to 64 bytes
  }
  fs::remove_all(dir);
}

TEST(Npy, ReadsFloat64Float16AndVersion2) {
  const double d[3] = {1.5, -2.25, 1e10};
  const Tensor a = parse_npy(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", d, sizeof d), "d");
  EXPECT_FLOAT_EQ(a.f32()[0], 1.5f);
  EXPECT_FLOAT_EQ(a.f32()[2], 1e10f);
  const std::uint16_t h[2] = {float_to_half_bits(0.5f), float_to_half_bits(-4.0f)};
  const Tensor b = parse_npy(npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2), }", h, sizeof h), "h");
  EXPECT_EQ(b.shape(), (Shape{1, 2}));
  EXPECT_FLOAT_EQ(b.f32()[1], -4.0f);
  const float f[4] = {1, 2, 3, 4};
  const Tensor c = parse_npy(npy_bytes("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 2)}", f, sizeof f, 2),
                             "v2");
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
}

TEST(Npy, MalformedFilesAreDataErrorsNamingTheFile) {
  const float f[4] = {1, 2, 3, 4};
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  auto expect_error = [](const std::vector<std::uint8_t>& bytes, const std::string& needle) {
    try {
      (void)parse_npy(bytes, "bad.npy");
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const DataError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("bad.npy"), std::string::npos) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
    }
  };
  expect_error({'n', 'o', 't', ' ', 'n', 'p', 'y', 0, 0, 0, 0}, "magic");
  expect_error(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", f, sizeof f), "dtype");
  expect_error(npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", f, 16), "dtype");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", f, sizeof f), "Fortran");
  expect_error(npy_bytes(ok, f, 12), "bytes of data");                  // truncated data
  expect_error(npy_bytes(ok, f, sizeof f, 4), "version");               // unknown format version
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False}", f, sizeof f), "shape");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", f, 4), "0-dimensional");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0), }", f, 0), "empty");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }",
                         f, sizeof f),
               "overflows");
  auto long_header = npy_bytes(ok, f, sizeof f);
  long_header[8] = 0xff;  // header length past the end of the file
  long_header[9] = 0xff;
  expect_error(long_header, "header length");
  EXPECT_THROW(read_npy("/nonexistent/x.npy"), DataError);
}

}  // namespace
}  // namespace cnnergy::data
