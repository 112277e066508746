// NumPy .npy arrays (format versions 1.0-3.0), as `cnnergy infer --inputs/--outputs` reads and writes
// them: little-endian float32 (float64 and float16 inputs are converted), C order, any rank. Every
// malformed file — bad magic, a header that is not the dictionary NumPy writes, Fortran order, an
// unsupported dtype, a shape whose size disagrees with the data — is a DataError naming the file.
#pragma once

#include <filesystem>
#include <span>
#include <vector>

#include "core/tensor.hpp"

namespace cnnergy::data {

// Reads an array into a host fp32 tensor of the file's shape (rank 1 to 8).
Tensor read_npy(const std::filesystem::path& path);
// Parses the bytes of a .npy file (what read_npy does after reading it); `name` goes into errors.
Tensor parse_npy(std::span<const std::uint8_t> bytes, const std::string& name);
// Writes a host fp32 tensor as a version 1.0 .npy file ('<f4', C order), atomically (temp + rename).
void write_npy(const std::filesystem::path& path, const Tensor& host_f32);

}  // namespace cnnergy::data
