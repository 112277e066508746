// cnnergyd under hostile input: >= 1,000 mutated, truncated, oversized and stalled messages, each on
// its own connection. Every one must be answered with a well-formed reply or the connection closed
// (0 hangs), and the daemon must keep running and serving, with the GPUs as they were.
#include <gtest/gtest.h>

#include <poll.h>

#include "core/rng.hpp"
#include "daemon_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::test;

namespace {

std::string framed(const std::string& payload, std::uint32_t declared) {
  std::string out;
  out.push_back(static_cast<char>(declared >> 24));
  out.push_back(static_cast<char>(declared >> 16));
  out.push_back(static_cast<char>(declared >> 8));
  out.push_back(static_cast<char>(declared));
  return out + payload;
}

std::string mutate(const std::string& base, Rng& rng) {
  std::string s = base;
  const int kind = static_cast<int>(rng.next_u32() % 6);
  const auto pos = [&] { return s.empty() ? 0 : rng.next_u32() % s.size(); };
  const int n = 1 + static_cast<int>(rng.next_u32() % 4);
  for (int i = 0; i < n; ++i) {
    switch (kind) {
      case 0:
        if (!s.empty()) s[pos()] = static_cast<char>(rng.next_u32() & 0xff);  // any byte, NUL and invalid UTF-8 too
        break;
      case 1:
        s.insert(pos(), 1, "{}[]\",:0-e.\\"[rng.next_u32() % 12]);
        break;
      case 2:
        if (!s.empty()) s.erase(pos(), 1 + rng.next_u32() % 8);
        break;
      case 3:
        s = s.substr(0, pos());
        break;
      case 4: {  // a number replaced by an extreme one
        const char* nums[] = {"1e999", "-1", "4294967296", "0.5", "NaN", "null", "true", "\"0\"", "1e-320"};
        const auto at = s.find_first_of("0123456789");
        if (at != std::string::npos) s.replace(at, 1, nums[rng.next_u32() % 9]);
        break;
      }
      default:
        s.insert(pos(), std::string(1 + rng.next_u32() % 300, "[{\"a"[rng.next_u32() % 4]));
        break;
    }
  }
  return s;
}

enum class Outcome { kAnswered, kClosed, kHang, kBadReply };

// Sends `bytes`, optionally half-closes, and reads replies until EOF: each must be a valid frame
// holding a JSON object with "ok". A silence of 5 s counts as a hang.
Outcome exchange(const std::string& socket, const std::string& bytes, bool half_close) {
  const int fd = connect_unix(socket);
  if (fd < 0) return Outcome::kHang;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (w <= 0) break;  // the daemon may close early (oversized): what it answered is read below
    done += static_cast<std::size_t>(w);
  }
  if (half_close) ::shutdown(fd, SHUT_WR);
  int replies = 0;
  Outcome out = Outcome::kClosed;
  for (;;) {
    const telemetry::Frame f = telemetry::read_frame(fd, 5000, 5000);
    if (f.status == telemetry::FrameStatus::kClosed || f.status == telemetry::FrameStatus::kError) break;
    if (f.status == telemetry::FrameStatus::kTimeout) {
      out = Outcome::kHang;
      break;
    }
    if (f.status != telemetry::FrameStatus::kOk) {
      out = Outcome::kBadReply;
      break;
    }
    try {
      const Json j = Json::parse(f.payload);
      if (!j.is_object() || !j.find("ok") || !j["ok"].is_bool()) {
        out = Outcome::kBadReply;
        break;
      }
    } catch (const std::exception&) {
      out = Outcome::kBadReply;
      break;
    }
    ++replies;
  }
  ::close(fd);
  if (out == Outcome::kClosed && replies > 0) out = Outcome::kAnswered;
  return out;
}

}  // namespace

TEST(DaemonFuzz, ThousandsOfMutatedAndOversizedMessagesNeverCrashOrHangIt) {
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  Rng rng(seed);
  FakeNvmlEnv fake(2);
  DaemonProcess d(fake);
  ASSERT_TRUE(d.start()) << d.log();
  const std::vector<std::string> bases = {
      R"({"v":1,"op":"hello"})",
      R"({"v":1,"op":"state","id":7})",
      R"({"v":1,"op":"set_power_limit","gpu":0,"watts":300})",
      R"({"v":1,"op":"lock_sm_clocks","gpu":1,"min_mhz":1005,"max_mhz":1005})",
      R"({"v":1,"op":"set_mem_clock","gpu":0,"mhz":2619})",
      R"({"v":1,"op":"reset_sm_clocks","gpu":1})",
      R"({"v":1,"op":"release"})",
  };
  int answered = 0, closed = 0, hangs = 0, bad = 0, sent = 0;
  auto tally = [&](Outcome o) {
    ++sent;
    if (o == Outcome::kAnswered) ++answered;
    if (o == Outcome::kClosed) ++closed;
    if (o == Outcome::kHang) ++hangs;
    if (o == Outcome::kBadReply) ++bad;
  };
  for (int i = 0; i < 1000; ++i) {
    const std::string payload = mutate(bases[rng.next_u32() % bases.size()], rng);
    std::uint32_t declared = static_cast<std::uint32_t>(payload.size());
    const int frame_kind = static_cast<int>(rng.next_u32() % 10);
    if (frame_kind == 0) declared = rng.next_u32();                                     // any length
    if (frame_kind == 1) declared = static_cast<std::uint32_t>(payload.size() + 1 + rng.next_u32() % 64);  // short
    std::string bytes = framed(payload, declared);
    if (frame_kind == 2) bytes = bytes.substr(0, rng.next_u32() % 4);  // a cut length prefix
    if (frame_kind == 3) bytes += framed(bases[1], static_cast<std::uint32_t>(bases[1].size()));  // two messages
    tally(exchange(d.socket(), bytes, true));
  }
  // Oversized: declared over the limit, and actually sent that large.
  for (std::uint32_t declared : {65537u, 1u << 20, 0xffffffffu}) tally(exchange(d.socket(), framed("{}", declared), true));
  tally(exchange(d.socket(), framed(std::string(70000, ' '), 70000), true));
  const std::string deep = std::string(60000, '[') + std::string(60000, ']');
  tally(exchange(d.socket(), framed(deep.substr(0, 65536), 65536), true));
  // Replies that would echo a huge value must stay under the limit and be answered.
  const std::string huge_v = "{\"v\":\"" + std::string(65000, 'A') + "\",\"op\":\"hello\"}";
  const Outcome echoed = exchange(d.socket(), framed(huge_v, static_cast<std::uint32_t>(huge_v.size())), true);
  EXPECT_EQ(echoed, Outcome::kAnswered);
  tally(echoed);
  // Stalled mid-message without closing: answered after the frame timeout (300 ms here).
  for (int i = 0; i < 3; ++i) tally(exchange(d.socket(), framed("{\"v\":1", 40), false));

  RecordProperty("messages", sent);
  RecordProperty("answered", answered);
  RecordProperty("closed_without_reply", closed);
  EXPECT_GE(sent, 1000);
  EXPECT_EQ(hangs, 0);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(answered + closed, sent);
  EXPECT_GT(answered, 900);  // only a cut length prefix or an empty stream closes without a reply
  ASSERT_FALSE(d.exited()) << "the daemon died: " << d.log();
  const int fd = connect_unix(d.socket());
  ASSERT_GE(fd, 0);
  const Json st = roundtrip(fd, request("state"));
  ::close(fd);
  ASSERT_TRUE(st.is_object() && st["ok"].as_bool()) << st.dump();
  for (unsigned g = 0; g < 2; ++g) {  // every accepted change was restored when its connection closed
    EXPECT_TRUE(wait_until([&] { return fake_setting(d.state_file(), g, "power_limit_mw") == "700000"; },
                           std::chrono::seconds(5)));
    EXPECT_EQ(fake_setting(d.state_file(), g, "sm_lock"), "0,0");
  }
}
