// ONNX export: every zoo model written with random weights (and random batch-norm statistics),
// read back by our importer, and run on the CPU against the original; a checkpoint's weights
// through the CLI; a layer with no mapping; bad MODEL and OUT arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "net/checkpoint.hpp"
#include "net/onnx/onnx_export.hpp"
#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"
#include "onnx/onnx_maker.hpp"
#include "train/cli_run.hpp"

namespace cnnergy::test {
namespace {

namespace fs = std::filesystem;
using cnnergy::testing::run_cli;

fs::path work_dir() {
  const fs::path dir = fs::temp_directory_path() / "cnnergy_onnx_export";
  fs::create_directories(dir);
  return dir;
}

std::unique_ptr<Executor> eval_executor(const Graph& g, Backend& b, std::int64_t batch) {
  ExecutorOptions o;
  o.batch_size = batch;
  o.training = false;
  return std::make_unique<Executor>(g, b, o);
}

// Batch-norm parameters and statistics away from their initial 1/0 (which would hide a mix-up).
void randomize_batch_norms(Executor& e, std::uint64_t seed) {
  Rng rng(seed);
  auto put = [&](const Tensor& t, float lo, float hi) {
    Tensor h = Tensor::host(t.shape());
    for (float& v : h.f32()) v = rng.uniform(lo, hi);
    e.backend().upload(h, t);
  };
  for (Parameter* p : e.parameters()) {
    if (p->name.ends_with(".gamma")) put(p->master, 0.5f, 1.5f);
    if (p->name.ends_with(".beta")) put(p->master, -0.2f, 0.2f);
  }
  for (StateBuffer* s : e.buffers()) {
    if (s->name.ends_with(".running_mean")) put(s->tensor, -0.2f, 0.2f);
    if (s->name.ends_with(".running_var")) put(s->tensor, 0.5f, 2.0f);
  }
  for (std::size_t i = 0; i < e.num_layers(); ++i) e.layer(i).refresh_working_copies();
}

std::vector<float> logits_of(Executor& e, const std::vector<float>& x) {
  Backend& b = e.backend();
  Tensor host = Tensor::host(e.graph().tensor(e.graph().input_tensor()).shape.with_batch(e.batch_size()));
  std::copy(x.begin(), x.end(), host.f32().begin());
  e.set_input(to_backend(b, host), Tensor{});
  e.forward(Phase::kEval);
  const Tensor out = to_host(b, e.logits());
  return {out.f32().begin(), out.f32().end()};
}

std::vector<float> random_input(const Graph& g, std::int64_t batch, std::uint64_t seed) {
  std::vector<float> x(static_cast<std::size_t>(g.input_per_sample().numel() * batch));
  Rng rng(seed);
  rng.fill_normal(x, 0.0f, 1.0f);
  return x;
}

// max |a - b| <= 1e-5 * max |a|
void expect_close(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  float max_abs = 0, max_diff = 0;
  for (std::size_t k = 0; k < want.size(); ++k) {
    ASSERT_TRUE(std::isfinite(want[k]) && std::isfinite(got[k])) << what << " at " << k;
    max_abs = std::max(max_abs, std::abs(want[k]));
    max_diff = std::max(max_diff, std::abs(want[k] - got[k]));
  }
  EXPECT_GT(max_abs, 0.0f) << what;
  EXPECT_LE(max_diff, 1e-5f * max_abs) << what << ": max abs difference " << max_diff << ", max abs logit " << max_abs;
}

// The input each model is checked at: small enough for the CPU reference backend on a 2-core CI
// machine (every layer, mapping and weight is the same; only spatial sizes and the first fc's width
// follow the input). CNNERGY_ONNX_EXPORT_FULL_SIZE=1 checks every model at its default input instead;
// check_exported.py and bench/onnxruntime_check.py always use the default inputs.
std::optional<Shape> round_trip_input(const std::string& name) {
  if (const char* full = std::getenv("CNNERGY_ONNX_EXPORT_FULL_SIZE"); full && *full == '1') return std::nullopt;
  static const std::map<std::string, Shape> reduced = {
      {"alexnet", {3, 100, 100}},     {"caffenet", {3, 100, 100}},   {"overfeat", {3, 100, 100}},
      {"vgg16", {3, 32, 32}},         {"vgg19", {3, 32, 32}},        {"googlenet", {3, 64, 64}},
      {"inception_v3", {3, 80, 80}},  {"inception_v4", {3, 80, 80}}, {"resnet34", {3, 64, 64}},
      {"resnetim", {3, 64, 64}},      {"resnet50", {3, 64, 64}},     {"resnet152", {3, 32, 32}},
      {"gait_2dcnn", {10, 60, 60}},   {"gait_resnet", {10, 32, 32}}};
  auto it = reduced.find(name);
  if (it == reduced.end()) return std::nullopt;  // lenet5, and models added later: their own input
  return it->second;
}

class ZooRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooRoundTrip, ExportImportGivesTheSameLogits) {
  const std::string name = GetParam();
  auto graph = build_model(name, round_trip_input(name));
  auto backend = cpu_backend();
  constexpr std::int64_t kBatch = 2;
  auto original = eval_executor(*graph, *backend, kBatch);
  original->initialize_parameters(7);
  randomize_batch_norms(*original, 8);
  OnnxExportSummary summary;
  const std::string bytes = export_onnx_bytes(*original, {}, &summary);
  EXPECT_EQ(summary.bytes, bytes.size());
  std::int64_t stored = 0;  // every parameter and buffer value, plus one dropout ratio per dropout
  for (Parameter* p : original->parameters()) stored += p->shape.numel();
  for (StateBuffer* s : original->buffers()) stored += s->shape.numel();
  EXPECT_EQ(summary.values, stored);

  // Back through the importer; its executor draws seed 1, then the file's initialisers replace it.
  auto imported_graph = import_onnx_bytes(bytes, name, "").builder.build();
  EXPECT_EQ(imported_graph->input_per_sample(), graph->input_per_sample());
  EXPECT_EQ(imported_graph->num_classes(), graph->num_classes());
  EXPECT_EQ(imported_graph->parameter_count(), graph->parameter_count());
  auto imported = eval_executor(*imported_graph, *backend, kBatch);
  imported->initialize_parameters(1);
  const auto x = random_input(*graph, kBatch, 9);
  expect_close(logits_of(*original, x), logits_of(*imported, x), name);
}

std::vector<std::string> zoo_names() {
  std::vector<std::string> names;
  for (const auto& m : model_zoo()) names.push_back(m.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooRoundTrip, ::testing::ValuesIn(zoo_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(OnnxExport, FixedBatchAndNamesAreWritten) {
  auto graph = build_model("lenet5");
  auto backend = cpu_backend();
  auto e = eval_executor(*graph, *backend, 1);
  e->initialize_parameters(1);
  OnnxExportOptions o;
  o.batch = 4;
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(export_onnx_bytes(*e, o)));
  EXPECT_EQ(m.ir_version(), kOnnxExportIrVersion);
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).version(), kOnnxExportOpset);
  ASSERT_EQ(m.graph().input_size(), 1);
  const auto& in = m.graph().input(0);
  EXPECT_EQ(in.name(), "input");
  EXPECT_EQ(in.type().tensor_type().elem_type(), onnx::TensorProto::FLOAT);
  ASSERT_EQ(in.type().tensor_type().shape().dim_size(), 4);
  EXPECT_EQ(in.type().tensor_type().shape().dim(0).dim_value(), 4);
  EXPECT_EQ(in.type().tensor_type().shape().dim(1).dim_value(), 1);
  ASSERT_EQ(m.graph().output_size(), 1);
  EXPECT_EQ(m.graph().output(0).name(), "logits");
  EXPECT_EQ(m.graph().output(0).type().tensor_type().shape().dim(1).dim_value(), 10);
  bool gemm = false, loss = false;
  for (const auto& n : m.graph().node()) {
    gemm = gemm || n.op_type() == "Gemm";
    loss = loss || n.op_type() == "Softmax";
  }
  EXPECT_TRUE(gemm);
  EXPECT_FALSE(loss);  // the inference graph ends in the logits
  // The default: a symbolic batch.
  ASSERT_TRUE(m.ParseFromString(export_onnx_bytes(*e)));
  EXPECT_EQ(m.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
}

// A layer type the exporter does not know.
class MysteryLayer final : public Layer {
 public:
  using Layer::Layer;
  std::string type() const override { return "mystery"; }
  LayerCategory category() const override { return LayerCategory::kOther; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<MysteryLayer>(name()); }
  void forward(const ForwardContext&) override {}
  void backward(const BackwardContext&) override {}

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override { return {in[0]}; }
  Workload compute_workload() const override { return {}; }
};

TEST(OnnxExport, AnUnmappedLayerIsNamed) {
  std::vector<GraphLayer> layers(2);
  const Shape x{1, 4};
  layers[0].layer = std::make_unique<MysteryLayer>("odd1");
  layers[0].layer->setup(std::vector<Shape>{x});
  layers[0].inputs = {0};
  layers[0].outputs = {1};
  layers[1].layer = make_softmax_loss_layer("loss");
  layers[1].layer->setup(std::vector<Shape>{x});
  layers[1].inputs = {1};
  std::vector<GraphTensor> tensors(2);
  tensors[0] = {0, "input", x, -1, {0}, false};
  tensors[1] = {1, "odd1", x, 0, {1}, false};
  Graph g("odd", Shape{4}, 4, std::move(layers), std::move(tensors), 1, 1);
  auto backend = cpu_backend();
  auto e = eval_executor(g, *backend, 1);
  try {
    export_onnx_bytes(*e);
    FAIL() << "exported a layer with no mapping";
  } catch (const NotSupported& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("'odd1'"), std::string::npos) << what;
    EXPECT_NE(what.find("mystery"), std::string::npos) << what;
    EXPECT_NE(what.find("conv: Conv"), std::string::npos) << what;  // the mapped types are listed
  }
}

// The CLI with a checkpoint: the file holds the checkpoint's weights, not the seed's.
TEST(OnnxExportCli, CheckpointWeightsAreExported) {
  auto graph = build_model("lenet5");
  auto backend = cpu_backend();
  ExecutorOptions o;
  o.batch_size = 3;
  Executor trained(*graph, *backend, o);
  trained.initialize_parameters(42);
  SgdSolver solver(trained, SolverOptions{});
  const fs::path ckpt = work_dir() / "lenet5.ckpt", out = work_dir() / "lenet5_ckpt.onnx";
  save_checkpoint(ckpt.string(), trained, solver);
  const auto r = run_cli("export-onnx lenet5 " + out.string() + " --checkpoint " + ckpt.string() + " --seed 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("opset 13"), std::string::npos) << r.output;
  auto imported_graph = import_onnx_file(out.string()).builder.build();
  auto imported = eval_executor(*imported_graph, *backend, 3);
  imported->initialize_parameters(1);
  auto reference = eval_executor(*graph, *backend, 3);
  reference->initialize_parameters(42);
  const auto x = random_input(*graph, 3, 11);
  expect_close(logits_of(*reference, x), logits_of(*imported, x), "lenet5 from a checkpoint");
  // Another seed without the checkpoint gives other weights: the checkpoint was what counted.
  const auto r2 = run_cli("export-onnx lenet5 " + out.string() + " --seed 5");
  ASSERT_EQ(r2.exit_code, 0) << r2.output;  // an existing OUT is replaced, like every cnnergy output
  auto g2 = import_onnx_file(out.string()).builder.build();
  auto e2 = eval_executor(*g2, *backend, 3);
  e2->initialize_parameters(1);
  const auto a = logits_of(*reference, x), b = logits_of(*e2, x);
  double diff = 0;
  for (std::size_t k = 0; k < a.size(); ++k) diff += std::abs(a[k] - b[k]);
  EXPECT_GT(diff, 1e-3);
}

TEST(OnnxExportCli, AnImportedModelIsWrittenWithItsInitialisers) {
  const fs::path first = work_dir() / "alex_a.onnx", second = work_dir() / "alex_b.onnx";
  ASSERT_EQ(run_cli("export-onnx lenet5 " + first.string() + " --seed 3 --batch 2").exit_code, 0);
  const auto r = run_cli("export-onnx " + first.string() + " " + second.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("initialisers"), std::string::npos) << r.output;
  auto backend = cpu_backend();
  auto ga = import_onnx_file(first.string()).builder.build();
  auto gb = import_onnx_file(second.string()).builder.build();
  auto ea = eval_executor(*ga, *backend, 2), eb = eval_executor(*gb, *backend, 2);
  ea->initialize_parameters(1);
  eb->initialize_parameters(2);
  const auto x = random_input(*ga, 2, 12);
  expect_close(logits_of(*ea, x), logits_of(*eb, x), "export of an imported model");
}

TEST(OnnxExportCli, BadModelAndOutputExitWithAReason) {
  const fs::path out = work_dir() / "bad.onnx";
  auto r = run_cli("export-onnx no_such_net " + out.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no_such_net"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lenet5"), std::string::npos) << r.output;  // the names it knows
  EXPECT_FALSE(fs::exists(out));
  r = run_cli("export-onnx lenet5 " + (work_dir() / "no_such_dir" / "x.onnx").string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("cannot write"), std::string::npos) << r.output;
  r = run_cli("export-onnx lenet5 " + work_dir().string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("directory"), std::string::npos) << r.output;
  r = run_cli("export-onnx lenet5 " + out.string() + " --checkpoint " + (work_dir() / "absent.ckpt").string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_FALSE(fs::exists(out)) << "a failed export leaves no file";
  r = run_cli("export-onnx lenet5 " + out.string() + " --batch 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_cli("export-onnx lenet5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace cnnergy::test
