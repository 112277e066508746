// `cnnergy export-onnx` implementation: flags -> the graph (zoo or ONNX) -> a CPU executor holding
// the weights (seeded, imported, or a checkpoint's) -> net/onnx/onnx_export -> one line of summary.
#include "cli/cmd_export_onnx.hpp"

#include <cstdio>
#include <optional>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "cli/vocabulary.hpp"
#include "core/json.hpp"
#include "core/errors.hpp"
#include "net/checkpoint.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/onnx/onnx_export.hpp"
#include "net/onnx/onnx_import.hpp"

namespace cnnergy::cli {

int run_export_onnx(const std::vector<std::string>& args) {
  ArgParser p("export-onnx", "Write MODEL with its weights as an ONNX file (opset " + std::to_string(kOnnxExportOpset) +
                                 ", IR version " + std::to_string(kOnnxExportIrVersion) + ").");
  p.positional("MODEL", "zoo model (cnnergy model-info --list) or an ONNX file (PATH.onnx, onnx:PATH)");
  p.positional("OUT", "the ONNX file to write (an existing file is replaced)");
  p.option("checkpoint", "trained weights (a checkpoint of this model, e.g. from train --save); default: seeded random");
  p.option("init", "initial weights of an ONNX model: file (its initialisers) or random (seeded, the zoo's rules)",
           "file", {"file", "random"});
  p.option("seed", "seed of the random weights", "1");
  p.option("input", "model input override CxHxW");
  p.option("classes", "model class-count override");
  p.option("batch", "first dimension of the input and the logits: a fixed size, or 'dynamic' (dim_param \"batch\")",
           "dynamic");
  declare_output_flags(p, "the summary of what was written");
  p.epilog("The inference graph: every layer becomes one ONNX node named after it (a fully connected layer\n"
           "on a 4-D input gets a Flatten before its Gemm), batch norms keep their running statistics\n"
           "(not folded), dropout is written as Dropout (the identity at inference), and the softmax loss\n"
           "head is left out: the output 'logits' is what `cnnergy infer --outputs` writes. Input 'input'\n"
           "is float32 NCHW. Weights are initialisers named as in checkpoints (conv1.weight, bn1.running_mean).\n"
           "Runs on the CPU. A layer with no ONNX mapping is refused, naming it (exit 4).");
  if (!p.parse(args)) return 0;
  OutputSink sink(p);
  const std::string model = p.get("MODEL"), out = p.get("OUT");
  OnnxExportOptions eo;
  if (const std::string b = p.get("batch"); b != "dynamic") eo.batch = p.get_int("batch", 1, 1 << 20);
  std::optional<Shape> input;
  if (auto s = p.get_optional("input")) input = parse_shape(*s);
  std::optional<std::int64_t> classes;
  if (p.get_optional("classes")) classes = p.get_int("classes", 2, 1 << 24);
  const auto seed = static_cast<std::uint64_t>(p.get_int("seed", 0, std::int64_t{1} << 62));
  const auto checkpoint = p.get_optional("checkpoint");
  check_onnx_output_path(out);  // before the work: a bad OUT fails at once

  auto graph = build_model_init(model, input, classes, p.get("init"));
  BackendOptions bo;  // the CPU backend: fp32 NCHW, where the weights are read back as they are
  auto backend = create_backend(bo);
  ExecutorOptions xo;
  xo.batch_size = 1;
  xo.training = false;
  Executor executor(*graph, *backend, xo);
  executor.initialize_parameters(seed);  // an imported model's initialisers replace the drawn values
  if (checkpoint) load_parameters(*checkpoint, executor);
  const OnnxExportSummary s = export_onnx_file(executor, out, eo);

  const Shape& in = graph->input_per_sample();
  std::string dims = eo.batch ? std::to_string(eo.batch) : "batch";
  for (auto d : in.dims()) dims += ", " + std::to_string(d);
  const std::string weights = checkpoint ? "checkpoint " + *checkpoint
                              : graph->initial_values().empty() ? "seeded random (--seed " + std::to_string(seed) + ")"
                                                                : "the model file's initialisers";
  std::printf("wrote %s: %s as ONNX opset %lld (IR version %lld), %zu nodes, %zu initialisers (%lld values), %.1f MiB\n"
              "  input '%s' (%s) float32 NCHW -> output '%s' (%s, %lld); weights: %s\n",
              out.c_str(), graph->model_name().c_str(), static_cast<long long>(kOnnxExportOpset),
              static_cast<long long>(kOnnxExportIrVersion), s.nodes, s.initializers, static_cast<long long>(s.values),
              static_cast<double>(s.bytes) / 1048576.0, eo.input_name.c_str(), dims.c_str(), eo.output_name.c_str(),
              eo.batch ? std::to_string(eo.batch).c_str() : "batch", static_cast<long long>(graph->num_classes()),
              weights.c_str());
  Json doc = Json::object();
  doc["file"] = out;
  doc["model"] = graph->model_name();
  doc["opset"] = kOnnxExportOpset;
  doc["ir_version"] = kOnnxExportIrVersion;
  doc["nodes"] = static_cast<std::int64_t>(s.nodes);
  doc["initializers"] = static_cast<std::int64_t>(s.initializers);
  doc["values"] = s.values;
  doc["bytes"] = static_cast<std::int64_t>(s.bytes);
  doc["input"] = eo.input_name;
  doc["output"] = eo.output_name;
  doc["batch"] = eo.batch ? Json(eo.batch) : Json("dynamic");
  Json shape = Json::array();
  for (auto d : in.dims()) shape.push_back(d);
  doc["input_per_sample"] = shape;
  doc["classes"] = graph->num_classes();
  doc["weights"] = weights;
  sink.finish(doc);
  return 0;
}

}  // namespace cnnergy::cli
