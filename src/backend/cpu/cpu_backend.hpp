// The CPU backend: the reference every other backend is tested against (fp32, NCHW), with a fast
// path for convolution and fully connected layers through OpenBLAS.
#pragma once

#include <memory>

#include "backend/ops.hpp"

namespace cnnergy::cpu {

std::unique_ptr<Backend> create_cpu_backend(const BackendOptions& options);

}  // namespace cnnergy::cpu
