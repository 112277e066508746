// ONNX's own backend test data (Debian libonnx-testdata): every test whose operators the importer
// supports runs on our CPU backend and must match the expected outputs within ONNX's tolerance
// (rtol 1e-3, atol 1e-7). Tests of unsupported operators, and supported operators in a
// configuration we do not map, are listed with their count, not silently skipped. Element-wise
// models with 1-D or 3-D data run on a 2-D view of it (elementwise_only below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "net/onnx/onnx_tensor.hpp"
#include "onnx/onnx_maker.hpp"

namespace cnnergy::test {
namespace {

namespace fs = std::filesystem;
const fs::path kRoot = "/usr/share/libonnx-testdata/data";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

onnx::TensorProto read_pb(const fs::path& p) {
  onnx::TensorProto t;
  if (!t.ParseFromString(slurp(p))) throw DataError("cannot parse " + p.string());
  return t;
}

struct Tally {
  int passed = 0;
  std::vector<std::string> failed, unsupported_op, rejected;
};

// Models made only of element-wise operators compute the same values on any view of their data: a
// 1-D input (F) runs as (1, F) and a 3-D one (N, A, B) as (N, A * B), the ranks our importer takes
// (the node tests of the activations use (3, 4, 5) and (3,) tensors). Constant operands keep their
// shapes, so a test whose constant only broadcasts against the 3-D shape is still rejected.
bool elementwise_only(const onnx::ModelProto& m) {
  static const std::set<std::string> kOps = {"Relu", "Sigmoid", "LeakyRelu", "HardSigmoid", "HardSwish", "Clip",
                                             "Identity", "Constant", "Mul", "Add", "Sub", "Div"};
  for (const auto& n : m.graph().node())
    if (!kOps.count(n.op_type())) return false;
  return m.graph().output_size() == 1;
}

void flatten_io(onnx::ModelProto& m, const std::string& input, onnx_import::ConstTensor& x) {
  const auto rank = x.dims.size();
  if (rank != 1 && rank != 3) return;
  const std::vector<std::int64_t> flat =
      rank == 1 ? std::vector<std::int64_t>{1, x.dims[0]} : std::vector<std::int64_t>{x.dims[0], x.dims[1] * x.dims[2]};
  auto reshape = [&](onnx::ValueInfoProto* v) {
    auto* shape = v->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (auto d : flat) shape->add_dim()->set_dim_value(d);
  };
  for (auto& v : *m.mutable_graph()->mutable_input())
    if (v.name() == input) reshape(&v);
  reshape(m.mutable_graph()->mutable_output(0));
  x.dims = flat;
}

// Runs one test directory; returns false when it does not apply.
void run_case(const fs::path& dir, Tally& tally) {
  const std::string name = dir.filename().string();
  onnx::ModelProto model;
  if (!model.ParseFromString(slurp(dir / "model.onnx"))) {
    tally.rejected.push_back(name + ": model does not parse");
    return;
  }
  const auto& supported = onnx_supported_ops();
  std::set<std::string> missing;
  for (const auto& n : model.graph().node())
    if (std::find(supported.begin(), supported.end(), n.op_type()) == supported.end() || n.op_type() == "Softmax")
      missing.insert(n.op_type() == "Softmax" ? "Softmax(left out at import)" : n.op_type());
  if (!missing.empty()) {
    std::string ops;
    for (const auto& m : missing) ops += (ops.empty() ? "" : ",") + m;
    tally.unsupported_op.push_back(name + " [" + ops + "]");
    return;
  }
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().starts_with("test_data_set_")) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return;
  for (const auto& set : sets) {
    // Inputs after the first become initialisers (weights), as a deployed model holds them.
    onnx::ModelProto m = model;
    std::set<std::string> inits;
    for (const auto& t : m.graph().initializer()) inits.insert(t.name());
    std::vector<std::string> inputs;
    for (const auto& v : m.graph().input())
      if (!inits.count(v.name())) inputs.push_back(v.name());
    for (std::size_t k = 1; k < inputs.size(); ++k) {
      const fs::path pb = set / ("input_" + std::to_string(k) + ".pb");
      if (!fs::exists(pb)) continue;
      onnx::TensorProto t = read_pb(pb);
      t.set_name(inputs[k]);
      *m.mutable_graph()->add_initializer() = t;
    }
    try {
      auto x = onnx_import::read_tensor(read_pb(set / "input_0.pb"), "");
      const auto want = onnx_import::read_tensor(read_pb(set / "output_0.pb"), "");
      if (x.integer || x.dims.empty()) throw NotSupported("integer or scalar input");
      if (elementwise_only(m) && !inputs.empty()) flatten_io(m, inputs[0], x);
      OnnxImportOptions o;
      std::vector<std::int64_t> per(x.dims.begin() + 1, x.dims.end());
      if (per.size() == 3 || per.size() == 1) o.input = Shape(per);
      auto imp = import_onnx_bytes(m.SerializeAsString(), name, "", o);
      const auto got = run_cpu(std::move(imp), x.dims[0], x.f);
      if (got.size() != want.size()) {
        tally.failed.push_back(name + ": " + std::to_string(got.size()) + " outputs, expected " +
                               std::to_string(want.size()));
        return;
      }
      double worst = 0;
      for (std::size_t k = 0; k < got.size(); ++k) {
        const double err = std::abs(double(got[k]) - want.at(k)) - (1e-7 + 1e-3 * std::abs(want.at(k)));
        worst = std::max(worst, err);
      }
      if (worst > 0) {
        tally.failed.push_back(name + "/" + set.filename().string() + ": beyond tolerance by " + std::to_string(worst));
        return;
      }
    } catch (const InternalError& e) {
      tally.failed.push_back(name + ": internal error: " + e.what());
      return;
    } catch (const Error& e) {
      tally.rejected.push_back(name + ": " + std::string(e.what()).substr(0, 160));
      return;
    }
  }
  ++tally.passed;
}

TEST(OnnxTestData, SupportedOperatorsMatchOnnxExpectedOutputs) {
  if (!fs::exists(kRoot / "node")) GTEST_SKIP() << "libonnx-testdata is not installed (" << kRoot << ")";
  Tally tally;
  std::vector<fs::path> dirs;
  for (const char* group : {"node", "pytorch-converted", "pytorch-operator", "simple"})
    if (fs::exists(kRoot / group))
      for (const auto& e : fs::directory_iterator(kRoot / group))
        if (fs::exists(e.path() / "model.onnx")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) run_case(d, tally);
  std::cout << "ONNX backend test data: " << dirs.size() << " tests; " << tally.passed << " passed, "
            << tally.failed.size() << " failed, " << tally.rejected.size()
            << " use supported operators in a configuration the importer rejects, " << tally.unsupported_op.size()
            << " use unsupported operators\n";
  std::cout << "-- rejected (supported operators, unsupported configuration):\n";
  for (const auto& s : tally.rejected) std::cout << "   " << s << "\n";
  std::cout << "-- unsupported operators:\n";
  for (const auto& s : tally.unsupported_op) std::cout << "   " << s << "\n";
  for (const auto& s : tally.failed) ADD_FAILURE() << s;
  EXPECT_GT(tally.passed, 20);
}

}  // namespace
}  // namespace cnnergy::test
