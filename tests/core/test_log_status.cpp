// Log lines and the progress bar's status line: a log line clears the bar, is printed above it on a
// line of its own, and the bar is drawn again (never "power_limit_w=200cnnergy info: ...").
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/log.hpp"

namespace {

// Runs `f` with stderr redirected to a temporary file and returns what was written.
template <typename F>
std::string capture_stderr(F f) {
  std::fflush(stderr);
  std::FILE* tmp = std::tmpfile();
  const int saved = ::dup(fileno(stderr));
  ::dup2(fileno(tmp), fileno(stderr));
  f();
  std::fflush(stderr);
  ::dup2(saved, fileno(stderr));
  ::close(saved);
  std::rewind(tmp);
  std::string out(1 << 16, '\0');
  out.resize(std::fread(out.data(), 1, out.size(), tmp));
  std::fclose(tmp);
  return out;
}

}  // namespace

TEST(LogStatusLine, LogLinesArePrintedAboveTheBarNeverGluedToIt) {
  const std::string out = capture_stderr([] {
    cnnergy::set_status_line("[###...] 1/3 now: power_limit_w=200");
    cnnergy::log_info("restored GPU 0");
    cnnergy::set_status_line("");
    cnnergy::log_info("after the bar");
  });
  const auto msg = out.find("cnnergy info: restored GPU 0\n");
  ASSERT_NE(msg, std::string::npos) << out;
  // Right before the message: the bar was cleared (carriage return + erase to end of line).
  EXPECT_EQ(out.substr(msg - 4, 4), "\r\x1b[K") << out;
  // After it: the bar drawn again, on its own line.
  const auto redraw = out.find("[###...] 1/3 now: power_limit_w=200", msg);
  EXPECT_NE(redraw, std::string::npos) << out;
  EXPECT_EQ(out.find("power_limit_w=200cnnergy"), std::string::npos) << out;
  // With the bar gone, a log line is plain again.
  const auto plain = out.find("cnnergy info: after the bar\n");
  ASSERT_NE(plain, std::string::npos) << out;
  EXPECT_EQ(out.find("[###...]", plain), std::string::npos) << out;
}
