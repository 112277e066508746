// ONNX import: a small CNN (Conv, BatchNormalization, Relu, MaxPool, GlobalAveragePool, a folded
// Shape->Gather->Unsqueeze->Concat->Reshape chain, Gemm) against a direct computation with its
// initialisers, both forms of inputs-that-were-attributes, and every kind of bad file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "net/zoo/zoo.hpp"
#include "onnx/onnx_maker.hpp"

namespace cnnergy::test {
namespace {

std::vector<float> random_values(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

struct SmallCnn {
  std::vector<float> w = random_values(4 * 3 * 3 * 3, 1), b = random_values(4, 2), gamma = random_values(4, 3, 0.5f, 1.5f),
                     beta = random_values(4, 4), mean = random_values(4, 5), var = random_values(4, 6, 0.5f, 2.0f),
                     fw = random_values(5 * 4, 7), fb = random_values(5, 8);
  OnnxMaker m;
  SmallCnn() {
    m.input("x", {1, 3, 6, 6});
    m.output("y", {1, 5});
    m.init("W", {4, 3, 3, 3}, w);
    m.init("B", {4}, b);
    m.init("gamma", {4}, gamma);
    m.init("beta", {4}, beta);
    m.init("mean", {4}, mean);
    m.init("var", {4}, var);
    m.init("FW", {5, 4}, fw);
    m.init("FB", {5}, fb);
    m.init_ints("minus_one", {-1});
    m.init_ints("zero", {0});
    OnnxMaker::attr_ints(m.node("Conv", {"x", "W", "B"}, {"c"}, "conv/0"), "pads", {1, 1, 1, 1});
    OnnxMaker::attr_float(m.node("BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"bn"}), "epsilon", 1e-3f);
    m.node("Relu", {"bn"}, {"r"});
    auto* p = m.node("MaxPool", {"r"}, {"p"});
    OnnxMaker::attr_ints(p, "kernel_shape", {2, 2});
    OnnxMaker::attr_ints(p, "strides", {2, 2});
    m.node("GlobalAveragePool", {"p"}, {"g"});
    m.node("Shape", {"g"}, {"s"});
    m.node("Gather", {"s", "zero"}, {"n"});
    m.node("Concat", {"n", "minus_one"}, {"shape"})->add_attribute()->CopyFrom([] {
      onnx::AttributeProto a;
      a.set_name("axis");
      a.set_type(onnx::AttributeProto::INT);
      a.set_i(0);
      return a;
    }());
    m.node("Reshape", {"g", "shape"}, {"f"});
    OnnxMaker::attr_int(m.node("Gemm", {"f", "FW", "FB"}, {"y"}), "transB", 1);
  }
  // The same network computed directly.
  std::vector<float> reference(const std::vector<float>& x) const {
    std::vector<float> y(5);
    float g[4] = {};
    for (int k = 0; k < 4; ++k) {
      const float scale = gamma[k] / std::sqrt(var[k] + 1e-3f);
      float act[6][6];
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) {
          double s = b[k];
          for (int c = 0; c < 3; ++c)
            for (int u = 0; u < 3; ++u)
              for (int v = 0; v < 3; ++v) {
                const int ii = i + u - 1, jj = j + v - 1;
                if (ii < 0 || jj < 0 || ii >= 6 || jj >= 6) continue;
                s += double(w[((k * 3 + c) * 3 + u) * 3 + v]) * x[(c * 6 + ii) * 6 + jj];
              }
          act[i][j] = std::max(0.0f, static_cast<float>((s - mean[k]) * scale + beta[k]));
        }
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
          g[k] += std::max({act[2 * i][2 * j], act[2 * i + 1][2 * j], act[2 * i][2 * j + 1], act[2 * i + 1][2 * j + 1]}) / 9.0f;
    }
    for (int o = 0; o < 5; ++o) {
      y[o] = fb[o];
      for (int k = 0; k < 4; ++k) y[o] += fw[o * 4 + k] * g[k];
    }
    return y;
  }
};

TEST(OnnxImport, SmallCnnMatchesDirectComputationWithItsInitialisers) {
  SmallCnn net;
  const auto x = random_values(3 * 36, 9);
  std::vector<float> got;
  try {
    got = run_cpu(import_onnx_bytes(net.m.bytes(), "small", ""), 1, x);
  } catch (const Error& e) {
    FAIL() << e.what();
  }
  const auto want = net.reference(x);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-4f) << k;
}

TEST(OnnxImport, RandomInitIgnoresTheInitialisers) {
  SmallCnn net;
  OnnxImportOptions o;
  o.random_init = true;
  const auto x = random_values(3 * 36, 9);
  const auto got = run_cpu(import_onnx_bytes(net.m.bytes(), "small", "", o), 1, x);
  const auto want = net.reference(x);
  double diff = 0;
  for (std::size_t k = 0; k < want.size(); ++k) diff += std::abs(got[k] - want[k]);
  EXPECT_GT(diff, 1e-3);
}

TEST(OnnxImport, RunsAtAnotherBatchAndThroughTheZooEntryPoint) {
  SmallCnn net;
  const auto dir = std::filesystem::temp_directory_path() / "cnnergy_onnx_zoo";
  std::filesystem::create_directories(dir);
  net.m.save((dir / "small.onnx").string());
  auto graph = build_model((dir / "small.onnx").string());
  EXPECT_EQ(graph->model_name(), "small");
  EXPECT_EQ(graph->num_classes(), 5);
  EXPECT_EQ(graph->input_per_sample(), (Shape{3, 6, 6}));
  EXPECT_GT(graph->parameter_count(), 100);
  auto x = random_values(2 * 3 * 36, 10);
  EXPECT_EQ(build_model("onnx:" + (dir / "small.onnx").string())->num_classes(), 5);
  const auto got = run_cpu(import_onnx_file((dir / "small.onnx").string()), 2, x);
  for (int s = 0; s < 2; ++s) {
    const auto want = net.reference(std::vector<float>(x.begin() + s * 108, x.begin() + (s + 1) * 108));
    for (int k = 0; k < 5; ++k) EXPECT_NEAR(got[static_cast<std::size_t>(s * 5 + k)], want[static_cast<std::size_t>(k)], 1e-4f);
  }
}

// A model: x (1, 2, 3, 3) -> op -> ... -> flatten -> y; the op given in both of its forms.
std::vector<float> run_form(OnnxMaker& m, const std::vector<float>& x) {
  return run_cpu(import_onnx_bytes(m.bytes(), "form", ""), 1, x);
}

TEST(OnnxImport, ReduceMeanAxesAsAttributeAndAsInput) {
  const auto x = random_values(18, 11);
  OnnxMaker a(13), b(18);
  for (auto* m : {&a, &b}) {
    m->input("x", {1, 2, 3, 3});
    m->output("y", {1, 2});
  }
  auto* na = a.node("ReduceMean", {"x"}, {"y"});
  OnnxMaker::attr_ints(na, "axes", {2, 3});
  OnnxMaker::attr_int(na, "keepdims", 0);
  b.init_ints("axes", {-1, -2});
  OnnxMaker::attr_int(b.node("ReduceMean", {"x", "axes"}, {"y"}), "keepdims", 0);
  const auto ya = run_form(a, x), yb = run_form(b, x);
  ASSERT_EQ(ya.size(), 2u);
  for (int c = 0; c < 2; ++c) {
    float mean = 0;
    for (int k = 0; k < 9; ++k) mean += x[static_cast<std::size_t>(c * 9 + k)] / 9.0f;
    EXPECT_NEAR(ya[static_cast<std::size_t>(c)], mean, 1e-5f);
    EXPECT_NEAR(yb[static_cast<std::size_t>(c)], mean, 1e-5f);
  }
}

TEST(OnnxImport, ClipMinMaxAsAttributesAndAsInputs) {
  const auto x = random_values(18, 12);
  OnnxMaker a(6 + 1), b(13);
  for (auto* m : {&a, &b}) {
    m->input("x", {1, 18});
    m->output("y", {1, 18});
  }
  OnnxMaker::attr_float(a.node("Clip", {"x"}, {"y"}), "min", 0.0f);
  b.init("lo", {}, {0.0f});
  b.node("Clip", {"x", "lo"}, {"y"});
  const auto ya = run_form(a, x), yb = run_form(b, x);
  for (std::size_t k = 0; k < x.size(); ++k) {
    EXPECT_FLOAT_EQ(ya[k], std::max(0.0f, x[k]));
    EXPECT_FLOAT_EQ(yb[k], std::max(0.0f, x[k]));
  }
  // ReLU6: both bounds, as attributes (opset 7) and as inputs (opset 13).
  OnnxMaker c(7), d(13);
  for (auto* m : {&c, &d}) {
    m->input("x", {1, 18});
    m->output("y", {1, 18});
  }
  auto* nc = c.node("Clip", {"x"}, {"y"}, "relu6");
  OnnxMaker::attr_float(nc, "min", 0.0f);
  OnnxMaker::attr_float(nc, "max", 0.5f);
  d.init("lo", {}, {0.0f});
  d.init("hi", {}, {0.5f});
  d.node("Clip", {"x", "lo", "hi"}, {"y"}, "relu6");
  const auto yc = run_form(c, x), yd = run_form(d, x);
  for (std::size_t k = 0; k < x.size(); ++k) {
    EXPECT_FLOAT_EQ(yc[k], std::clamp(x[k], 0.0f, 0.5f));
    EXPECT_FLOAT_EQ(yd[k], std::clamp(x[k], 0.0f, 0.5f));
  }
}

TEST(OnnxImport, SqueezeAxesAsAttributeAndAsInput) {
  const auto x = random_values(4, 13);
  OnnxMaker a(11), b(13);
  for (auto* m : {&a, &b}) {
    m->input("x", {1, 4, 1, 1});
    m->output("y", {1, 4});
  }
  OnnxMaker::attr_ints(a.node("Squeeze", {"x"}, {"y"}), "axes", {2, 3});
  b.init_ints("axes", {2, 3});
  b.node("Squeeze", {"x", "axes"}, {"y"});
  EXPECT_EQ(run_form(a, x), x);
  EXPECT_EQ(run_form(b, x), x);
}

TEST(OnnxImport, PadPadsAsAttributeAndAsInputGoIntoTheAveragePool) {
  const auto x = random_values(9, 14);
  OnnxMaker a(10), b(13);
  for (auto* m : {&a, &b}) {
    m->input("x", {1, 1, 3, 3});
    m->output("y", {1, 9});
  }
  OnnxMaker::attr_ints(a.node("Pad", {"x"}, {"p"}), "pads", {0, 0, 1, 1, 0, 0, 1, 1});
  b.init_ints("pads", {0, 0, 1, 1, 0, 0, 1, 1});
  b.node("Pad", {"x", "pads"}, {"p"});
  for (auto* m : {&a, &b}) {
    auto* pool = m->node("AveragePool", {"p"}, {"q"});
    OnnxMaker::attr_ints(pool, "kernel_shape", {3, 3});
    m->node("Flatten", {"q"}, {"y"});
  }
  for (auto* m : {&a, &b}) {
    const auto y = run_form(*m, x);
    ASSERT_EQ(y.size(), 9u);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        float sum = 0;  // ONNX: the padded zeros count (they are real elements after Pad)
        for (int u = i - 1; u <= i + 1; ++u)
          for (int v = j - 1; v <= j + 1; ++v)
            if (u >= 0 && v >= 0 && u < 3 && v < 3) sum += x[static_cast<std::size_t>(u * 3 + v)];
        EXPECT_NEAR(y[static_cast<std::size_t>(i * 3 + j)], sum / 9.0f, 1e-6f);
      }
  }
}

TEST(OnnxImport, MatMulWithAddBecomesOneFullyConnectedLayer) {
  OnnxMaker m(13);
  m.input("x", {1, 3});
  m.output("y", {1, 2});
  m.init("B", {3, 2}, {1, 2, 3, 4, 5, 6});
  m.init("C", {2}, {10, 20});
  m.node("MatMul", {"x", "B"}, {"t"});
  m.node("Add", {"t", "C"}, {"y"});
  auto imp = import_onnx_bytes(m.bytes(), "mm", "");
  const auto y = run_cpu(std::move(imp), 1, {1, 1, 1});
  EXPECT_FLOAT_EQ(y[0], 1 + 3 + 5 + 10);
  EXPECT_FLOAT_EQ(y[1], 2 + 4 + 6 + 20);
}

// ---- bad input ---------------------------------------------------------------------------------

template <typename E>
std::string error_of(const std::string& bytes, const std::string& dir = "") {
  try {
    import_onnx_bytes(bytes, "bad", dir).builder.build();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error of the expected type";
  return "";
}

TEST(OnnxImportErrors, NotOnnxAndTruncated) {
  EXPECT_NE(error_of<DataError>("this is a text file, not a model").find("not an ONNX model"), std::string::npos);
  SmallCnn net;
  const std::string bytes = net.m.bytes();
  for (std::size_t cut : {bytes.size() / 3, bytes.size() / 2, bytes.size() - 7})
    EXPECT_FALSE(error_of<Error>(bytes.substr(0, cut)).empty());
  try {
    import_onnx_file("/nonexistent/model.onnx");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.onnx"), std::string::npos);
  }
}

TEST(OnnxImportErrors, CycleIsFound) {
  OnnxMaker m;
  m.input("x", {1, 4});
  m.output("y", {1, 4});
  m.node("Add", {"x", "b"}, {"a"}, "first");
  m.node("Relu", {"a"}, {"b"}, "second");
  m.node("Relu", {"a"}, {"y"});
  EXPECT_NE(error_of<DataError>(m.bytes()).find("cycle"), std::string::npos);
}

TEST(OnnxImportErrors, UnsupportedOperatorNamesOpNodeAndTheSupportedOnes) {
  OnnxMaker m;
  m.input("x", {1, 4});
  m.output("y", {1, 4});
  m.node("Relu", {"x"}, {"r"});
  m.node("Erf", {"r"}, {"y"}, "my_erf");
  const std::string msg = error_of<NotSupported>(m.bytes());
  EXPECT_NE(msg.find("Erf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("my_erf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("BatchNormalization"), std::string::npos) << msg;
  EXPECT_EQ(static_cast<int>(ExitCode::kUnsupported), NotSupported("x").exit_code());
}

TEST(OnnxImportErrors, DynamicInputNeedsAnOverride) {
  OnnxMaker m;
  auto* v = m.graph->add_input();
  v->set_name("x");
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_param("N");
  t->mutable_shape()->add_dim()->set_dim_param("features");
  m.output("y", {1, 4});
  m.node("Relu", {"x"}, {"y"});
  EXPECT_NE(error_of<InvalidArgument>(m.bytes()).find("--input"), std::string::npos);
  OnnxImportOptions o;
  o.input = Shape{4};
  EXPECT_EQ(import_onnx_bytes(m.bytes(), "dyn", "", o).builder.build()->num_classes(), 4);
}

TEST(OnnxImportErrors, ExternalDataMissingEscapingAndPresent) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "cnnergy_onnx_ext";
  fs::create_directories(dir);
  auto model = [&](const std::string& location, std::int64_t length) {
    OnnxMaker m;
    m.input("x", {1, 2});
    m.output("y", {1, 2});
    auto* t = m.graph->add_initializer();
    t->set_name("B");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(2);
    t->add_dims(2);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* e = t->add_external_data();
    e->set_key("location");
    e->set_value(location);
    auto* l = t->add_external_data();
    l->set_key("length");
    l->set_value(std::to_string(length));
    m.node("MatMul", {"x", "B"}, {"y"});
    return m.bytes();
  };
  EXPECT_NE(error_of<DataError>(model("missing.bin", 16), dir.string()).find("missing.bin"), std::string::npos);
  EXPECT_NE(error_of<DataError>(model("../../etc/passwd", 16), dir.string()).find("leaves"), std::string::npos);
  EXPECT_NE(error_of<DataError>(model("/etc/passwd", 16), dir.string()).find("absolute"), std::string::npos);
  const float w[4] = {1, 0, 0, 2};
  {
    std::ofstream f(dir / "w.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(w), sizeof(w));
  }
  EXPECT_NE(error_of<DataError>(model("w.bin", 32), dir.string()).find("does not fit"), std::string::npos);
  // A NUL would cut the name at the system call (w.bin read in place of "w.bin\0x"); control
  // characters name no exported file: both refused.
  EXPECT_NE(error_of<DataError>(model(std::string("w.bin\0x", 7), 16), dir.string()).find("NUL or control"),
            std::string::npos);
  EXPECT_NE(error_of<DataError>(model("w\n.bin", 16), dir.string()).find("NUL or control"), std::string::npos);
  const auto y = run_cpu(import_onnx_bytes(model("w.bin", 16), "ext", dir.string()), 1, {3, 4});
  EXPECT_FLOAT_EQ(y[0], 3);
  EXPECT_FLOAT_EQ(y[1], 8);
}

// 1,000 mutated copies of a valid model (fixed seed): each imports or throws a typed error.
TEST(OnnxImportFuzz, MutatedFilesEndInSuccessOrATypedError) {
  SmallCnn net;
  const std::string bytes = net.m.bytes();
  Rng rng(2024);
  int ok = 0, typed = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    std::string b = bytes;
    const int edits = 1 + static_cast<int>(rng.uniform(0.0f, 0.999f) * 4);
    for (int e = 0; e < edits; ++e) {
      const auto pos = static_cast<std::size_t>(rng.uniform(0.0f, 0.999f) * static_cast<double>(b.size()));
      const float kind = rng.uniform(0.0f, 1.0f);
      if (kind < 0.6) b[pos] = static_cast<char>(rng.uniform(0.0f, 0.999f) * 256);
      else if (kind < 0.8) b.erase(pos, 1 + static_cast<std::size_t>(rng.uniform(0.0f, 0.999f) * 8));
      else b.insert(pos, 1, static_cast<char>(rng.uniform(0.0f, 0.999f) * 256));
    }
    try {
      import_onnx_bytes(b, "fuzz", "").builder.build();
      ++ok;
    } catch (const Error&) {
      ++typed;
    }
  }
  EXPECT_EQ(ok + typed, 1000);
  EXPECT_GT(typed, 100);
}

}  // namespace
}  // namespace cnnergy::test
