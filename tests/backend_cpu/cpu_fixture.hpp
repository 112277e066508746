// Fixture of the CPU backend tests: a seeded RNG (seed printed on failure) and a CPU backend made
// through the public factory, as layers get it.
#pragma once

#include <memory>

#include "backend/ops.hpp"
#include "common/gradient_check.hpp"
#include "common/tensor_testing.hpp"

namespace cnnergy::test {

class CpuBackendTest : public SeededTest {
 protected:
  std::unique_ptr<Backend> backend_ = create_backend(BackendOptions{});
};

}  // namespace cnnergy::test
