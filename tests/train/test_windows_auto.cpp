// --reps auto in the measurement windows of built-in models: more windows while the time per
// iteration varies by more than the threshold, up to the bound, flagged noisy when it stays so; a
// fixed count (max_repetitions 0) is unchanged.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backend/ops.hpp"
#include "measure/window.hpp"

using namespace cnnergy;

TEST(WindowsAuto, ANoisyIterationGetsWindowsUpToTheBoundAndIsFlagged) {
  auto backend = create_backend(BackendOptions{});  // the CPU: an iteration is what it does on the host
  int calls = 0;
  auto noisy = [&] { std::this_thread::sleep_for(std::chrono::milliseconds(++calls % 2 ? 12 : 1)); };
  WindowSpec spec{0.0, 1, 3, 0};  // one iteration per window: windows alternate slow and fast
  spec.max_repetitions = 6;
  spec.cv_threshold = 0.05;
  const WindowResult r = measure_windows(*backend, nullptr, noisy, spec);
  EXPECT_EQ(r.windows.size(), 6u);
  EXPECT_TRUE(r.noisy);

  spec.max_repetitions = 0;  // fixed: three windows, still flagged
  const WindowResult fixed = measure_windows(*backend, nullptr, noisy, spec);
  EXPECT_EQ(fixed.windows.size(), 3u);
  EXPECT_TRUE(fixed.noisy);

  auto calm = [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); };
  spec.max_repetitions = 6;
  spec.cv_threshold = 10.0;  // 1000 %: any spread of sleep is calm enough
  const WindowResult quiet = measure_windows(*backend, nullptr, calm, spec);
  EXPECT_EQ(quiet.windows.size(), 3u);
  EXPECT_FALSE(quiet.noisy);
}
