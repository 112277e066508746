// `cnnergy daemon-state`: what the cnnergyd knob daemon reports (each GPU's power limit and clocks,
// who holds it and since when, and what this user may change). Read-only: it sends state queries.
#include <cstdio>
#include <ctime>
#include <string>

#include "cli/args.hpp"
#include "cli/vocabulary.hpp"
#include "cli/telemetry_commands.hpp"
#include "core/json.hpp"
#include "telemetry/knob_client.hpp"

namespace cnnergy::cli {

namespace {
std::string text(const Json& v, const char* unit) {
  if (v.is_null()) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g %s", v.as_number(), unit);
  return buf;
}
}  // namespace

int run_daemon_state(const std::vector<std::string>& args) {
  ArgParser p("daemon-state",
              "Ask the cnnergyd knob daemon for the state of the GPUs it manages: power limits, "
              "clocks, which user holds each GPU and since when, and what you may change. Changes "
              "nothing.");
  p.option("socket", "the daemon's socket [default: $CNNERGY_DAEMON_SOCKET or /run/cnnergy/cnnergyd.sock]");
  declare_output_flags(p, "the GPUs' state (JSON/CSV: the daemon's reply, one CSV row per GPU)");
  p.epilog("Exit status: 0; 4 when no daemon answers; 6 when you may not connect (not in its group).");
  if (!p.parse(args)) return 0;
  OutputSink sink(p);
  telemetry::KnobClient client(p.get_optional("socket").value_or(telemetry::default_daemon_socket()));
  std::fprintf(stderr, "cnnergy: daemon-state: %s\n", client.describe().c_str());
  const Json s = client.state();
  std::printf("cnnergyd policy: %s\n", s["policy"].as_string().c_str());
  std::printf("you (uid %s) %s change GPU settings through it\n", s["uid"].dump().c_str(),
              s["may_change"].as_bool() ? "may" : "may NOT");
  for (const Json& g : s["gpus"].items()) {
    std::string holder = "free";
    if (!g["held_by_uid"].is_null()) {
      const std::time_t t = static_cast<std::time_t>(
          json_integer(g["held_since_unix_s"], "held_since_unix_s", 0, std::int64_t{1} << 53));
      std::tm tm{};
      ::gmtime_r(&t, &tm);
      char when[40];
      std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
      holder = "held by uid " + g["held_by_uid"].dump() + " since " + when +
               (g["held_by_you"].as_bool() ? " (you)" : "");
    }
    std::printf("GPU %s %s (%s): power limit %s (range %s - %s), SM %s, memory %s; %s; %s\n",
                g["index"].dump().c_str(), g["name"].as_string().c_str(), g["uuid"].as_string().c_str(),
                text(g["power_limit_w"], "W").c_str(), text(g["power_limit_min_w"], "W").c_str(),
                text(g["power_limit_max_w"], "W").c_str(), text(g["sm_clock_mhz"], "MHz").c_str(),
                text(g["mem_clock_mhz"], "MHz").c_str(),
                g["changeable"].as_bool() ? "changeable" : "not changeable", holder.c_str());
  }
  sink.finish(s, "gpus");
  return 0;
}

}  // namespace cnnergy::cli
