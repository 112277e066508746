// The exporter: OpenMetrics text of a hand-made sample and window, the loopback server scraped over
// 127.0.0.1 (a port the OS picks; a port in use is refused with a clear message), and
// `cnnergy monitor --prometheus-port 0 --jsonl FILE -- CMD` scraped while the command runs.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "core/json.hpp"
#include "exporter/job_map.hpp"
#include "exporter/metrics_server.hpp"
#include "exporter/openmetrics.hpp"
#include "telemetry/telemetry_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::exporter;

namespace {

telemetry::Sample sample_at(double energy_j) {
  telemetry::Sample s;
  s.t_ns = 1'000'000'000;
  telemetry::GpuSample g;
  g.power_mw = 250'500;
  g.energy_mj = static_cast<std::uint64_t>(energy_j * 1000);
  g.sm_mhz = 1410;
  g.mem_mhz = 2619;
  g.temperature_c = 61;
  g.utilization = telemetry::Utilization{87, 40};
  g.clock_event_reasons = 0x4;  // sw_power_cap
  s.gpus.push_back(g);
  s.cpu_energy_mj = 12'000;
  return s;
}

}  // namespace

TEST(OpenMetrics, RendersTheLatestSampleAndWindows) {
  MetricsState state({{0, "GPU-abc\"d", "H100"}});
  state.on_sample(sample_at(1.5));
  state.on_sample(sample_at(2.5));
  telemetry::Measurement m;
  m.label = "epoch";
  m.elapsed_ms = 2000;
  telemetry::GpuEnergy e;
  e.energy_mj = 500'000;
  m.gpus.push_back(e);
  state.on_window(m);
  state.on_window(m);
  const std::string text = state.render();
  const std::string gpu = "{gpu=\"0\",uuid=\"GPU-abc\\\"d\",model=\"H100\"}";
  EXPECT_NE(text.find("# TYPE cnnergy_gpu_energy_joules counter\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# UNIT cnnergy_gpu_energy_joules joules\n"), std::string::npos);
  EXPECT_NE(text.find("cnnergy_gpu_energy_joules_total" + gpu + " 2.5\n"), std::string::npos);
  EXPECT_NE(text.find("cnnergy_gpu_power_watts" + gpu + " 250.5\n"), std::string::npos);
  EXPECT_NE(text.find("cnnergy_gpu_sm_clock_hertz" + gpu + " 1410000000\n"), std::string::npos);
  EXPECT_NE(text.find("cnnergy_gpu_utilization_ratio" + gpu + " 0.87"), std::string::npos);
  EXPECT_NE(text.find("cnnergy_gpu_temperature_celsius" + gpu + " 61\n"), std::string::npos);
  EXPECT_NE(text.find("reason=\"sw_power_cap\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("reason=\"gpu_idle\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("cnnergy_cpu_energy_joules_total 12\n"), std::string::npos);
  EXPECT_NE(text.find("cnnergy_sampler_samples_total 2\n"), std::string::npos);
  EXPECT_NE(text.find("cnnergy_window_completions_total{window=\"epoch\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("cnnergy_window_energy_joules_total{window=\"epoch\"} 1000\n"),
            std::string::npos);
  EXPECT_NE(text.find("cnnergy_window_last_energy_joules{window=\"epoch\"} 500\n"),
            std::string::npos);
  ASSERT_GE(text.size(), 6u);
  EXPECT_EQ(text.substr(text.size() - 6), "# EOF\n");
  // Every family's samples are contiguous: a name seen, left, and seen again would be invalid.
  std::istringstream is(text);
  std::string line, last_family;
  std::set<std::string> done;
  while (std::getline(is, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    const std::string family = line.substr(7, line.find(' ', 7) - 7);
    EXPECT_TRUE(done.insert(family).second) << "family twice: " << family;
  }
}

TEST(OpenMetrics, EscapesLabels) {
  EXPECT_EQ(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

TEST(OpenMetrics, SlurmJobLabelsOnlyTheGpusAJobHoldsAndEscapesThem) {
  MetricsState state({{0, "GPU-0", "H100 \"SXM\""}, {3, "GPU-3", "H100"}});
  telemetry::Sample two = sample_at(1.5);
  two.gpus.push_back(two.gpus.front());
  state.on_sample(two);
  JobIds jobs = {{3, "12\"3\n4"}};
  state.set_job_source([&jobs] { return jobs; });
  std::string text = state.render();
  EXPECT_NE(text.find("cnnergy_gpu_power_watts{gpu=\"0\",uuid=\"GPU-0\",model=\"H100 \\\"SXM\\\"\"} "), std::string::npos)
      << text;
  EXPECT_NE(text.find("{gpu=\"3\",uuid=\"GPU-3\",model=\"H100\",slurm_job_id=\"12\\\"3\\n4\"}"), std::string::npos) << text;
  jobs.clear();  // the job ended: the label goes at the next scrape
  text = state.render();
  EXPECT_EQ(text.find("slurm_job_id"), std::string::npos) << text;
}

TEST(JobMap, ReadsOneJobPerGpuFileAndIgnoresEverythingElse) {
  const auto dir = std::filesystem::temp_directory_path() / ("cnnergy-jobmap-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "0") << "4242\n";
  std::ofstream(dir / "2") << "99_3 \nsecond line\n";
  std::ofstream(dir / "notes") << "7\n";
  std::ofstream(dir / "5");  // empty: no job
  const JobIds jobs = read_job_map(dir.string());
  EXPECT_EQ(jobs, (JobIds{{0, "4242"}, {2, "99_3"}}));
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(read_job_map(dir.string()).empty());  // no folder: no job
}

TEST(MetricsServer, ServesOnTheAddressItIsGivenAndRefusesANonAddress) {
  MetricsServer server(0, [] { return std::string("x 1\n# EOF\n"); }, "127.0.0.1");
  EXPECT_EQ(server.url(), "http://127.0.0.1:" + std::to_string(server.port()) + "/metrics");
  EXPECT_EQ(http_get_loopback(server.port(), "/metrics").status, 200);
  EXPECT_THROW(MetricsServer(0, [] { return std::string(); }, "localhost:80"), InvalidArgument);
}

TEST(MetricsServer, ServesOverLoopbackOnAPortTheSystemPicks) {
  MetricsServer server(0, [] { return std::string("cnnergy_x 1\n# EOF\n"); });
  ASSERT_GT(server.port(), 0u);
  const HttpReply r = http_get_loopback(server.port(), "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8");
  EXPECT_EQ(r.body, "cnnergy_x 1\n# EOF\n");
  EXPECT_EQ(http_get_loopback(server.port(), "/").status, 404);
  EXPECT_EQ(http_get_loopback(server.port(), "/metrics").status, 200);  // serves again
}

TEST(MetricsServer, APortInUseIsAClearError) {
  MetricsServer first(0, [] { return std::string(); });
  try {
    MetricsServer second(first.port(), [] { return std::string(); });
    FAIL() << "a second server bound the same port";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("already in use"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos);
  }
}

TEST(MonitorExporter, CnnergyMonitorServesAndStreamsWhileTheCommandRuns) {
  test::FakeNvmlEnv env(2, 50, 1);
  env.env.set("CNNERGY_FAKE_NVML_LOAD", "0.5");
  const std::string jsonl = env.dir.file("samples.jsonl");
  const std::string out = env.dir.file("out.txt"), err = env.dir.file("err.txt");
  const pid_t pid = test::spawn({test::cnnergy_binary(), "monitor", "--prometheus-port", "0",
                                 "--jsonl", jsonl, "--", "sleep", "2"},
                                out, err);
  std::smatch match;
  const std::regex url("serving OpenMetrics at http://127\\.0\\.0\\.1:([0-9]+)/metrics");
  std::string stderr_text;
  ASSERT_TRUE(test::wait_until(
      [&] {
        stderr_text = test::read_file(err);
        return std::regex_search(stderr_text, match, url);
      },
      std::chrono::seconds(20)))
      << stderr_text;
  const unsigned port = static_cast<unsigned>(std::stoul(match[1].str()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a few samples in
  const HttpReply r = http_get_loopback(port, "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("cnnergy_gpu_energy_joules_total{gpu=\"0\",uuid=\"GPU-fa4e"),
            std::string::npos)
      << r.body;
  EXPECT_NE(r.body.find("cnnergy_gpu_energy_joules_total{gpu=\"1\""), std::string::npos);
  EXPECT_NE(r.body.find("cnnergy_gpu_power_watts{gpu=\"0\""), std::string::npos);
  EXPECT_NE(r.body.find("cnnergy_gpu_throttle_reason{gpu=\"0\""), std::string::npos);
  const test::RunResult done = test::wait_result(pid, out, err);
  EXPECT_EQ(done.exit_code, 0) << done.err;
  std::ifstream in(jsonl);
  std::string line;
  int samples = 0, windows = 0;
  while (std::getline(in, line)) {
    const Json j = Json::parse(line);
    if (j.at("type").str() == "sample") {
      ++samples;
      EXPECT_EQ(j.at("gpus").items().size(), 2u);
      EXPECT_TRUE(j.at("gpus").items()[0].at("power_w").is_number());
    } else if (j.at("type").str() == "window") {
      ++windows;
      EXPECT_EQ(j.at("name").str(), "sleep 2");
      EXPECT_GT(j.at("energy_j").number(), 0);
    }
  }
  EXPECT_GE(samples, 10);
  EXPECT_EQ(windows, 1);
}

TEST(MonitorExporter, APortInUseStopsMonitorBeforeTheCommandRuns) {
  test::FakeNvmlEnv env(1, 50, 1);
  MetricsServer taken(0, [] { return std::string(); });
  const std::string marker = env.dir.file("ran");
  const test::RunResult r = test::run_cnnergy(
      {"monitor", "--prometheus-port", std::to_string(taken.port()), "--", "touch", marker},
      env.dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("already in use"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker));
}
