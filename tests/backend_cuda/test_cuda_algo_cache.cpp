// The persistent algorithm cache on a GPU (core/algo_cache.hpp through the CUDA convolution): a
// second backend of the same problems takes every decision from the cache and searches nothing,
// running the same algorithms; a cached graph engine or legacy algorithm that no longer validates
// is searched again, never run, and the result still matches the CPU reference.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "backend_cuda/cuda_fixture.hpp"
#include "core/json.hpp"

namespace cnnergy::test {
namespace {

Conv2dDesc conv(std::int64_t n, std::int64_t c, std::int64_t hw, std::int64_t k, std::int64_t r,
                std::int64_t stride, std::int64_t pad) {
  Conv2dDesc d;
  d.n = n, d.c = c, d.h = d.w = hw, d.k = k, d.r = d.s = r;
  d.stride_h = d.stride_w = stride;
  d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = pad;
  d.bias = false;
  return d;
}

// A small "model": two distinct problems and a repeat of the first.
std::vector<Conv2dDesc> model() {
  return {conv(4, 16, 14, 32, 3, 1, 1), conv(4, 32, 14, 32, 1, 2, 0), conv(4, 16, 14, 32, 3, 1, 1)};
}

class CudaAlgoCache : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    dir_ = std::filesystem::temp_directory_path() /
           ("cnnergy_gpu_algo_cache_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::unique_ptr<Backend> backend(const std::string& policy) const {
    BackendOptions o;
    o.device = Device{DeviceKind::kCuda, 0};
    o.layout = Layout::kNHWC;
    o.conv_algo_policy = policy;
    o.conv_epilogue_fusion = false;  // only the searches' decisions are cached and compared
    o.conv_space_to_depth = false;
    o.workspace_limit_bytes = std::size_t{256} << 20;
    o.algo_cache_dir = dir_.string();
    return create_backend(o);
  }
  // Binds every layer (info() resolves all directions, as a training executor does).
  static std::vector<ConvAlgoInfo> bind(Backend& b) {
    std::vector<ConvAlgoInfo> infos;
    for (const Conv2dDesc& d : model()) infos.push_back(b.make_conv(d, {})->info());
    return infos;
  }
  std::string cache_file() const {
    for (const auto& e : std::filesystem::directory_iterator(dir_))
      if (e.path().extension() == ".json") return e.path().string();
    return {};
  }
  // Rewrites every cached decision of `kind` with `edit`.
  void edit_cache(const std::string& kind, const std::function<void(Json&)>& edit) const {
    const std::string path = cache_file();
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    Json j = Json::parse(text.str());
    Json entries = Json::object();
    for (const auto& [key, value] : j.at("entries").members()) {
      Json v = value;
      if (v.at("kind").as_string() == kind) edit(v);
      entries[key] = v;
    }
    j["entries"] = entries;
    std::ofstream(path, std::ios::trunc) << j.dump(1);
  }
  // Forward of the first layer against the CPU reference.
  void check_forward(Backend& g, const std::string& what) {
    const Conv2dDesc d = model().front();
    const Tensor x = random(d.input_shape(), DType::kF32),
                 w = random(d.weight_shape(), DType::kF32);
    Tensor ref = Tensor::host(d.output_shape());
    cpu_->make_conv(d, {})->forward(x, w, Tensor{}, ref);
    const Tensor xd = upload(g, x, DType::kF32, Layout::kNHWC);
    const Tensor wd = upload(g, w, DType::kF32, Layout::kNHWC);
    Tensor y = g.alloc(d.output_shape(), DType::kF32, Layout::kNHWC);
    g.make_conv(d, {})->forward(xd, wd, Tensor{}, y);
    EXPECT_TRUE(close(download(g, y), ref, kFp32.tol, what));
  }
  std::filesystem::path dir_;
};

TEST_F(CudaAlgoCache, SecondBindTakesEveryDecisionFromTheCache) {
  for (const std::string policy : {"auto", "find", "graph_find"}) {
    std::filesystem::remove_all(dir_);
    std::vector<ConvAlgoInfo> first;
    {
      auto g = backend(policy);
      first = bind(*g);
      const AlgoSearchStats s = g->algo_search_stats();
      EXPECT_GT(s.searched, 0u) << policy;
      EXPECT_FALSE(s.cache_path.empty()) << policy;
    }
    ASSERT_FALSE(cache_file().empty()) << policy << ": nothing was written";
    auto g = backend(policy);  // a new process would see the same: the first backend is gone
    const std::vector<ConvAlgoInfo> second = bind(*g);
    const AlgoSearchStats s = g->algo_search_stats();
    EXPECT_EQ(s.searched, 0u) << policy << ": searched again with every decision cached";
    EXPECT_GT(s.cached, 0u) << policy;
    ASSERT_EQ(second.size(), first.size());
    for (std::size_t i = 0; i < first.size(); ++i) {
      EXPECT_EQ(second[i].forward, first[i].forward) << policy << " layer " << i;
      EXPECT_EQ(second[i].backward_data, first[i].backward_data) << policy << " layer " << i;
      EXPECT_EQ(second[i].backward_filter, first[i].backward_filter) << policy << " layer " << i;
    }
    check_forward(*g, policy + " from the cache");
  }
}

TEST_F(CudaAlgoCache, InvalidCachedEngineOrAlgorithmIsSearchedAgain) {
  for (const std::string policy : {"graph_find", "find"}) {
    std::filesystem::remove_all(dir_);
    { bind(*backend(policy)); }
    if (policy == "graph_find") {
      // An engine index no cuDNN has, and a knob type past the last one: neither finalizes.
      bool odd = false;
      edit_cache("graph",
                 [&](Json& v) { v["engine"] = (odd = !odd) ? "eng99999" : "eng0_k999=5"; });
    } else {
      edit_cache("legacy", [](Json& v) { v["algo"] = 97; });
    }
    auto g = backend(policy);
    const std::vector<ConvAlgoInfo> infos = bind(*g);
    const AlgoSearchStats s = g->algo_search_stats();
    EXPECT_GT(s.searched, 0u) << policy << ": an invalid cached decision was not searched again";
    for (const ConvAlgoInfo& info : infos)
      for (const std::string& a : {info.forward, info.backward_data, info.backward_filter}) {
        EXPECT_EQ(a.find("99999"), std::string::npos) << a;
        EXPECT_EQ(a.find("algo#97"), std::string::npos) << a;
      }
    check_forward(*g, policy + " after an invalid cached decision");
    g.reset();  // the last owner of its algorithm cache: what is still pending is written now
    // The file holds the new, valid decisions.
    std::ifstream in(cache_file());
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(text.str().find("eng99999"), std::string::npos);
  }
}

}  // namespace
}  // namespace cnnergy::test
