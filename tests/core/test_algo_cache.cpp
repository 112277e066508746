// The persistent algorithm cache (core/algo_cache.hpp) without a GPU: keying (any field change
// misses), write-through and reload, the atomic temp-and-rename write, corrupt / foreign-version /
// other-GPU files (ignored with a warning, rewritten), concurrent writer processes, a directory
// that cannot be written, and the directory resolution (flag, environment, XDG, home).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/algo_cache.hpp"
#include "core/json.hpp"

using namespace cnnergy;
namespace fs = std::filesystem;

namespace {

AlgoCacheContext h100() { return {"NVIDIA H100 80GB HBM3", 90, 12080, "570.86.15", 91900, 12080}; }

ConvProblemKey problem() {
  ConvProblemKey k;
  k.direction = "forward";
  k.n = 64, k.c = 64, k.h = 56, k.w = 56, k.k = 128, k.r = 3, k.s = 3, k.groups = 1;
  k.stride_h = k.stride_w = 1, k.pad_h = k.pad_w = 1, k.dilation_h = k.dilation_w = 1;
  k.dtype = "bf16", k.layout = "nhwc", k.math = "tensor_op", k.beta = 0.0f;
  k.policy = "find", k.workspace_limit_bytes = std::uint64_t{4} << 30, k.candidates = 0;
  return k;
}

AlgoDecision legacy(int algo) {
  AlgoDecision d;
  d.kind = "legacy";
  d.algo = algo;
  d.math_type = 1;
  d.workspace_bytes = 1024;
  d.device_ms = 0.5;
  return d;
}

// A fresh directory per test, removed afterwards.
class AlgoCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("cnnergy_algo_cache_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  std::string dir() const { return dir_.string(); }
  static void write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  }
  fs::path dir_;
};

}  // namespace

TEST_F(AlgoCacheTest, EveryKeyFieldChangeMisses) {
  AlgoCache cache(dir(), h100());
  cache.record(problem(), legacy(1));
  ASSERT_TRUE(cache.lookup(problem()));
  const std::vector<std::function<void(ConvProblemKey&)>> changes = {
      [](ConvProblemKey& k) { k.direction = "backward_data"; },
      [](ConvProblemKey& k) { k.n = 128; },
      [](ConvProblemKey& k) { k.c = 32; },
      [](ConvProblemKey& k) { k.h = 28; },
      [](ConvProblemKey& k) { k.w = 28; },
      [](ConvProblemKey& k) { k.k = 64; },
      [](ConvProblemKey& k) { k.r = 1; },
      [](ConvProblemKey& k) { k.s = 1; },
      [](ConvProblemKey& k) { k.groups = 2; },
      [](ConvProblemKey& k) { k.stride_h = 2; },
      [](ConvProblemKey& k) { k.stride_w = 2; },
      [](ConvProblemKey& k) { k.pad_h = 0; },
      [](ConvProblemKey& k) { k.pad_w = 0; },
      [](ConvProblemKey& k) { k.dilation_h = 2; },
      [](ConvProblemKey& k) { k.dilation_w = 2; },
      [](ConvProblemKey& k) { k.dtype = "f16"; },
      [](ConvProblemKey& k) { k.layout = "nchw"; },
      [](ConvProblemKey& k) { k.math = "fp32"; },
      [](ConvProblemKey& k) { k.beta = 1.0f; },
      [](ConvProblemKey& k) { k.policy = "graph_find"; },
      [](ConvProblemKey& k) { k.workspace_limit_bytes = 1 << 20; },
      [](ConvProblemKey& k) { k.candidates = 14; },
  };
  for (std::size_t i = 0; i < changes.size(); ++i) {
    ConvProblemKey k = problem();
    changes[i](k);
    EXPECT_NE(k.str(), problem().str()) << "change " << i;
    EXPECT_FALSE(cache.lookup(k)) << "change " << i << " hit: " << k.str();
  }
  // Another GPU, driver, cuDNN or CUDA version is another file: nothing of this one is seen.
  const std::vector<std::function<void(AlgoCacheContext&)>> contexts = {
      [](AlgoCacheContext& c) { c.gpu_name = "NVIDIA H200"; },
      [](AlgoCacheContext& c) { c.compute_capability = 80; },
      [](AlgoCacheContext& c) { c.driver_version = 12090; },
      [](AlgoCacheContext& c) { c.driver_release = "580.65.06"; },
      [](AlgoCacheContext& c) { c.cudnn_version = 90100; },
      [](AlgoCacheContext& c) { c.cuda_runtime_version = 12040; },
  };
  for (std::size_t i = 0; i < contexts.size(); ++i) {
    AlgoCacheContext c = h100();
    contexts[i](c);
    AlgoCache other(dir(), c);
    EXPECT_NE(other.file_path(), cache.file_path()) << "context change " << i;
    EXPECT_FALSE(other.lookup(problem())) << "context change " << i;
  }
}

TEST_F(AlgoCacheTest, WritesThroughAtomicallyAndReloads) {
  AlgoCacheContext ctx = h100();
  {
    AlgoCache cache(dir(), ctx);
    EXPECT_TRUE(cache.persistent());
    cache.record(problem(), legacy(6));
    AlgoDecision g;
    g.kind = "graph";
    g.engine = "eng42_k3=2_k11=-1";
    g.workspace_bytes = 5u << 20;
    ConvProblemKey gk = problem();
    gk.policy = "graph_find";
    gk.candidates = 14;
    cache.record(gk, g);
  }
  // No temporary file is left behind: each write is a rename of a complete file.
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir())) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
    ++files;
  }
  EXPECT_EQ(files, 2u);  // the cache and its lock file
  AlgoCache again(dir(), ctx);
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(again.warnings(), 0u);
  const auto hit = again.lookup(problem());
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->kind, "legacy");
  EXPECT_EQ(hit->algo, 6);
  EXPECT_EQ(hit->math_type, 1);
  EXPECT_EQ(hit->workspace_bytes, 1024u);
  EXPECT_DOUBLE_EQ(hit->device_ms, 0.5);
  ConvProblemKey gk = problem();
  gk.policy = "graph_find";
  gk.candidates = 14;
  const auto graph = again.lookup(gk);
  ASSERT_TRUE(graph);
  EXPECT_EQ(graph->engine, "eng42_k3=2_k11=-1");
  // The file is valid JSON of this format.
  std::ifstream in(again.file_path());
  std::stringstream text;
  text << in.rdbuf();
  const Json j = Json::parse(text.str());
  EXPECT_EQ(j.at("version").as_number(), AlgoCache::kFormatVersion);
  EXPECT_EQ(j.at("context").at("gpu_name").as_string(), ctx.gpu_name);
}

TEST_F(AlgoCacheTest, CorruptForeignAndOtherGpuFilesAreIgnoredOnceAndRewritten) {
  AlgoCache good(dir(), h100());
  good.record(problem(), legacy(2));
  const std::string path = good.file_path();
  std::string valid;
  {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    valid = s.str();
  }
  AlgoCacheContext h200 = h100();
  h200.gpu_name = "NVIDIA H200";
  std::string other_gpu;
  {
    AlgoCache other(dir() + "/other", h200);
    other.record(problem(), legacy(3));
    std::ifstream in(other.file_path());
    std::stringstream s;
    s << in.rdbuf();
    other_gpu = s.str();
  }
  std::string other_version = valid;
  other_version.replace(other_version.find("\"version\": 1"), 12, "\"version\": 99");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"truncated", valid.substr(0, valid.size() / 2)},
      {"garbage",
       "\x7f"
       "ELF\x01\x02 not json at all"},
      {"empty", ""},
      {"other version", other_version},
      {"other GPU", other_gpu},
      {"wrong shape", "{\"format\": \"cnnergy-conv-algo-cache\", \"version\": 1, \"context\": 3}"},
  };
  for (const auto& [what, text] : bad) {
    write(path, text);
    AlgoCache cache(dir(), h100());
    EXPECT_FALSE(cache.lookup(problem())) << what << ": a decision was trusted";
    EXPECT_EQ(cache.warnings(), 1u) << what;
    cache.record(problem(), legacy(4));  // rewritten, valid again
    AlgoCache reread(dir(), h100());
    EXPECT_EQ(reread.warnings(), 0u) << what;
    ASSERT_TRUE(reread.lookup(problem())) << what;
    EXPECT_EQ(reread.lookup(problem())->algo, 4) << what;
  }
}

TEST_F(AlgoCacheTest, ConcurrentWriterProcessesKeepEveryEntry) {
  constexpr int kWriters = 2, kEntries = 40;
  fs::create_directories(dir());
  std::vector<pid_t> children;
  for (int p = 0; p < kWriters; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        AlgoCache cache(dir(), h100());
        for (int i = 0; i < kEntries; ++i) {
          ConvProblemKey k = problem();
          k.n = 1000 * (p + 1) + i;
          cache.record(k, legacy(p));
        }
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  AlgoCache merged(dir(), h100());
  EXPECT_EQ(merged.warnings(), 0u);
  EXPECT_EQ(merged.size(), static_cast<std::size_t>(kWriters * kEntries));
  for (int p = 0; p < kWriters; ++p)
    for (int i = 0; i < kEntries; ++i) {
      ConvProblemKey k = problem();
      k.n = 1000 * (p + 1) + i;
      const auto hit = merged.lookup(k);
      ASSERT_TRUE(hit) << "writer " << p << " entry " << i << " lost";
      EXPECT_EQ(hit->algo, p);
    }
}

TEST_F(AlgoCacheTest, DecisionsWithinTheWriteIntervalWaitForFlushOrTheDestructor) {
  auto key = [&](int i) {
    ConvProblemKey k = problem();
    k.n = 100 + i;
    return k;
  };
  auto on_disk = [&] { return AlgoCache(dir(), h100()).size(); };
  {
    AlgoCache cache(dir(), h100());
    cache.record(key(0), legacy(1));  // the first decision is written at once
    EXPECT_EQ(on_disk(), 1u);
    // The rest come microseconds apart, well within kWriteIntervalS: kept in memory, not
    // rewritten into the file one by one (the O(N^2) file work a search used to pay).
    for (int i = 1; i < 200; ++i) cache.record(key(i), legacy(2));
    EXPECT_EQ(on_disk(), 1u);
    EXPECT_EQ(cache.size(), 200u);  // this process sees them all
    cache.flush();
    EXPECT_EQ(on_disk(), 200u);
    cache.flush();  // nothing pending: the file is not touched
    EXPECT_EQ(on_disk(), 200u);
    cache.forget(key(0));
    cache.record(key(200), legacy(3));
  }  // the destructor writes the forget and the last decision
  AlgoCache reread(dir(), h100());
  EXPECT_EQ(reread.size(), 200u);
  EXPECT_FALSE(reread.lookup(key(0)));
  ASSERT_TRUE(reread.lookup(key(200)));
  EXPECT_EQ(reread.lookup(key(200))->algo, 3);
}

TEST_F(AlgoCacheTest, UnwritableDirectoryWarnsOnceAndRunsInMemory) {
  // A path below a regular file cannot be created, whoever runs the test (root included).
  fs::create_directories(dir());
  write(dir() + "/a_file", "x");
  AlgoCache cache(dir() + "/a_file/cnnergy", h100());
  cache.record(problem(), legacy(1));
  ConvProblemKey second = problem();
  second.n = 7;
  cache.record(second, legacy(2));
  EXPECT_FALSE(cache.persistent());
  EXPECT_EQ(cache.warnings(), 1u);
  ASSERT_TRUE(cache.lookup(problem()));  // still serves this process
  EXPECT_EQ(cache.lookup(second)->algo, 2);
  // A read-only directory, where permissions bind (not for root).
  if (::geteuid() != 0) {
    const std::string ro = dir() + "/readonly";
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    AlgoCache r(ro, h100());
    r.record(problem(), legacy(1));
    r.record(second, legacy(1));
    EXPECT_FALSE(r.persistent());
    EXPECT_EQ(r.warnings(), 1u);
    EXPECT_TRUE(r.lookup(problem()));
    fs::permissions(ro, fs::perms::owner_all);
  }
}

TEST_F(AlgoCacheTest, MemoryOnlyAndForget) {
  AlgoCache memory("", h100());
  EXPECT_FALSE(memory.persistent());
  EXPECT_TRUE(memory.file_path().empty());
  memory.record(problem(), legacy(1));
  EXPECT_TRUE(memory.lookup(problem()));
  memory.forget(problem());
  EXPECT_FALSE(memory.lookup(problem()));
  // A forgotten decision leaves the file at the next write.
  AlgoCache disk(dir(), h100());
  disk.record(problem(), legacy(1));
  disk.forget(problem());
  ConvProblemKey other = problem();
  other.n = 3;
  disk.record(other, legacy(2));
  disk.flush();  // the second record came within the write interval of the first
  AlgoCache reread(dir(), h100());
  EXPECT_FALSE(reread.lookup(problem()));
  EXPECT_TRUE(reread.lookup(other));
  // One registry entry per (directory, context).
  EXPECT_EQ(shared_algo_cache(dir(), h100()), shared_algo_cache(dir(), h100()));
}

TEST(AlgoCacheTag, ParsesEngineTags) {
  const auto t = parse_engine_tag("eng12_k3=2_k11=-1");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->engine_id, 12);
  ASSERT_EQ(t->knobs.size(), 2u);
  EXPECT_EQ(t->knobs[1], (std::pair<std::int64_t, std::int64_t>{11, -1}));
  EXPECT_TRUE(parse_engine_tag("eng0"));
  for (const char* bad : {"", "eng", "engx", "eng1_k", "eng1_k3", "eng1_k3=", "eng1_x3=2", "fft"})
    EXPECT_FALSE(parse_engine_tag(bad)) << bad;
}

TEST(AlgoCacheDir, FlagThenEnvironmentThenXdgThenHome) {
  const char* saved_env = std::getenv("CNNERGY_ALGO_CACHE");
  const char* saved_xdg = std::getenv("XDG_CACHE_HOME");
  const char* saved_home = std::getenv("HOME");
  const std::string env = saved_env ? saved_env : "", xdg = saved_xdg ? saved_xdg : "",
                    home = saved_home ? saved_home : "";
  ::setenv("CNNERGY_ALGO_CACHE", "/tmp/from_env", 1);
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  ::setenv("HOME", "/tmp/home", 1);
  EXPECT_EQ(resolve_algo_cache_dir("/tmp/flag"), "/tmp/flag");
  EXPECT_EQ(resolve_algo_cache_dir("off"), "");
  EXPECT_EQ(resolve_algo_cache_dir(""), "/tmp/from_env");
  ::setenv("CNNERGY_ALGO_CACHE", "off", 1);
  EXPECT_EQ(resolve_algo_cache_dir(""), "");
  EXPECT_EQ(resolve_algo_cache_dir("/tmp/flag"), "/tmp/flag");  // the flag wins
  ::unsetenv("CNNERGY_ALGO_CACHE");
  EXPECT_EQ(resolve_algo_cache_dir(""), "/tmp/xdg/cnnergy");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(resolve_algo_cache_dir(""), "/tmp/home/.cache/cnnergy");
  ::unsetenv("HOME");
  EXPECT_EQ(resolve_algo_cache_dir(""), "");
  auto restore = [](const char* name, const char* saved, const std::string& value) {
    if (saved)
      ::setenv(name, value.c_str(), 1);
    else
      ::unsetenv(name);
  };
  restore("CNNERGY_ALGO_CACHE", saved_env, env);
  restore("XDG_CACHE_HOME", saved_xdg, xdg);
  restore("HOME", saved_home, home);
}
