// `cnnergy model-info MODEL [--batch B] [--input CxHxW] [--classes K] [--format table|csv|json]
// [--dtype fp32|fp16|bf16] [--summary]` and `cnnergy model-info --list`. Parses flags, asks the
// zoo and net/model_info for the numbers, and prints them; no counting happens here.
#include "cli/cmd_model_info.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "cli/args.hpp"
#include "cli/backend_flags.hpp"
#include "cli/vocabulary.hpp"
#include "core/dtype.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "core/shape.hpp"
#include "net/graph.hpp"
#include "net/model_info.hpp"
#include "net/executor.hpp"
#include "net/zoo/zoo.hpp"
#include "train/fixed_batch.hpp"
#include "train/precision.hpp"

namespace cnnergy::cli {
namespace {

constexpr const char* kConventions =
    "counting conventions (per sample; details in docs/model-info.md):\n"
    "  operations  Castro et al. 2019, Eqs. 1-7: a multiply-accumulate is ONE operation.\n"
    "              conv: kw*kh*wout*hout*(cin/groups)*cout, plus one add per output element when it\n"
    "              has a bias; fc: in*out;\n"
    "              pooling: window*output; ReLU, dropout: 1 per element; batch norm: 2 per element;\n"
    "              softmax: 3 per class; LRN: size+3 per element; add: 1 per element; concat and\n"
    "              flatten: 0.\n"
    "  FLOPs       forward: 2 per multiply-accumulate, 1 per element-wise operation; backward: data\n"
    "              and weight gradients (2x the forward MACs) for conv/fc (no data gradient for the\n"
    "              layer that reads the network input), about the forward FLOPs for the others.\n"
    "  read        Eq. 8 as input elements + all the layer's weights (Castro et al. 2019's Table 1\n"
    "              counts the weights in full); written: Eq. 9, output elements.\n"
    "  bytes       elements x the --dtype size; MiB = 2^20 bytes (Castro et al. 2019's 'MB').\n"
    "  CTC         operations / read elements (Castro et al. 2019, Section 4.1).\n"
    "  batch       Eqs. 10-12: operations, FLOPs, read and written scale with --batch (so weights are\n"
    "              counted once per sample); the table's last line also gives the read volume when\n"
    "              a batched kernel reads each weight once per batch.\n"
    "  parameters  trained parameters (batch-norm running statistics excluded), as torchvision counts.";

// 1234567 -> "1.23M": three significant digits for tables.
std::string human(std::int64_t v) {
  const double d = static_cast<double>(v);
  char buf[32];
  if (v < 10000) std::snprintf(buf, sizeof buf, "%" PRId64, v);
  else if (d < 1e6) std::snprintf(buf, sizeof buf, "%.2fK", d / 1e3);
  else if (d < 1e9) std::snprintf(buf, sizeof buf, "%.2fM", d / 1e6);
  else if (d < 1e12) std::snprintf(buf, sizeof buf, "%.2fG", d / 1e9);
  else std::snprintf(buf, sizeof buf, "%.2fT", d / 1e12);
  return buf;
}

// 25557032 -> "25,557,032" (exact counts, readable).
std::string grouped(std::int64_t v) {
  const std::string digits = std::to_string(v);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}


std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char ch : s) out += (ch == '"') ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

// Text columns left-aligned, numbers right-aligned, widths from the content.
class TextTable {
 public:
  // The first `left_columns` columns (and the last, when last_left) hold text.
  explicit TextTable(std::size_t left_columns, bool last_left = false)
      : left_columns_(left_columns), last_left_(last_left) {}
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  void rule() { rows_.emplace_back(); }
  std::string str() const {
    std::vector<std::size_t> width;
    for (const auto& r : rows_)
      for (std::size_t c = 0; c < r.size(); ++c) {
        if (width.size() <= c) width.push_back(0);
        width[c] = std::max(width[c], r[c].size());
      }
    std::size_t total = 0;
    for (const auto w : width) total += w + 2;
    std::ostringstream os;
    for (const auto& r : rows_) {
      if (r.empty()) {
        os << std::string(total > 2 ? total - 2 : 0, '-') << "\n";
        continue;
      }
      for (std::size_t c = 0; c < r.size(); ++c) {
        const std::string pad(width[c] - r[c].size(), ' ');
        const bool left = c < left_columns_ || (last_left_ && c + 1 == r.size());
        if (c + 1 == r.size() && left) os << r[c];  // no trailing blanks
        else os << (left ? r[c] + pad : pad + r[c]) << (c + 1 < r.size() ? "  " : "");
      }
      os << "\n";
    }
    return os.str();
  }

 private:
  std::size_t left_columns_;
  bool last_left_;
  std::vector<std::vector<std::string>> rows_;
};

std::vector<std::string> table_cells(const ModelInfo& info, const std::string& name, const std::string& type,
                                     const std::string& output, const Workload& w, double ctc) {
  return {name,
          type,
          output,
          human(w.parameters),
          human(w.operations),
          human(w.flops_forward),
          human(w.flops_backward),
          fixed(info.mib(w.read_elements), 2),
          fixed(info.mib(w.written_elements), 2),
          fixed(ctc, 1)};
}

std::string format_table(const ModelInfo& info, bool summary) {
  std::ostringstream os;
  os << "model " << info.model << ": input " << info.input_per_sample.str() << ", " << info.num_classes
     << " classes, batch " << info.batch << ", bytes at " << dtype_name(info.dtype) << "; " << info.parameters
     << " parameters\n";
  os << "(numbers per batch of " << info.batch << ", Castro et al. 2019, Eqs. 10-12; operations count a "
     << "multiply-accumulate once, FLOPs twice; see --help)\n\n";
  TextTable t(3);
  t.row({"layer", "type", "output", "params", "operations", "fwd FLOPs", "bwd FLOPs", "read MiB", "written MiB",
         "CTC"});
  t.rule();
  if (!summary) {
    for (const auto& l : info.layers)
      t.row(table_cells(info, l.name, l.type, l.output_shape.str(), l.batch, l.ctc));
    t.rule();
  }
  t.row(table_cells(info, "total (batch)", "", "", info.total_batch, info.ctc()));
  t.row(table_cells(info, "total (per sample)", "", "", info.total_per_sample, info.ctc()));
  os << t.str();
  os << "\nread with each weight once per batch: " << fixed(info.mib(info.read_elements_weights_once()), 2)
     << " MiB; training step (forward + backward): "
     << human(info.total_batch.flops_forward + info.total_batch.flops_backward) << " FLOPs\n";
  return os.str();
}

std::string workload_csv(const ModelInfo& info, const Workload& w) {
  std::ostringstream os;
  os << w.parameters << "," << w.operations << "," << w.flops_forward << "," << w.flops_backward << ","
     << w.read_elements << "," << w.written_elements << "," << fixed(info.mib(w.read_elements), 6) << ","
     << fixed(info.mib(w.written_elements), 6);
  return os.str();
}

std::string format_csv(const ModelInfo& info, bool summary) {
  std::ostringstream os;
  os << "model,batch,dtype,layer,type,category,output_shape,parameters,operations,flops_forward,flops_backward,"
        "read_elements,written_elements,read_mib,written_mib,ctc,details\n";
  const std::string prefix = csv_field(info.model) + "," + std::to_string(info.batch) + "," +
                             std::string(dtype_name(info.dtype)) + ",";
  if (!summary)
    for (const auto& l : info.layers)
      os << prefix << csv_field(l.name) << "," << l.type << "," << l.category << "," << l.output_shape.str() << ","
         << workload_csv(info, l.batch) << "," << fixed(l.ctc, 4) << "," << csv_field(l.details) << "\n";
  os << prefix << "total,,,," << workload_csv(info, info.total_batch) << "," << fixed(info.ctc(), 4) << ",\n";
  return os.str();
}

std::string workload_json(const ModelInfo& info, const Workload& w) {
  std::ostringstream os;
  os << "{\"parameters\": " << w.parameters << ", \"operations\": " << w.operations
     << ", \"flops_forward\": " << w.flops_forward << ", \"flops_backward\": " << w.flops_backward
     << ", \"read_elements\": " << w.read_elements << ", \"written_elements\": " << w.written_elements
     << ", \"read_mib\": " << json_number(info.mib(w.read_elements))
     << ", \"written_mib\": " << json_number(info.mib(w.written_elements)) << "}";
  return os.str();
}

std::string format_json(const ModelInfo& info, bool summary) {
  std::ostringstream os;
  os << "{\n  \"model\": " << json_quote(info.model) << ",\n  \"input\": [";
  for (std::size_t i = 0; i < info.input_per_sample.rank(); ++i) os << (i ? ", " : "") << info.input_per_sample[i];
  os << "],\n  \"classes\": " << info.num_classes << ",\n  \"batch\": " << info.batch
     << ",\n  \"dtype\": " << json_quote(std::string(dtype_name(info.dtype)))
     << ",\n  \"parameters\": " << info.parameters << ",\n  \"ctc\": " << json_number(info.ctc())
     << ",\n  \"read_elements_weights_once\": " << info.read_elements_weights_once()
     << ",\n  \"total_per_sample\": " << workload_json(info, info.total_per_sample)
     << ",\n  \"total_batch\": " << workload_json(info, info.total_batch);
  if (!summary) {
    os << ",\n  \"layers\": [";
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
      const auto& l = info.layers[i];
      os << (i ? ",\n" : "\n") << "    {\"name\": " << json_quote(l.name) << ", \"type\": " << json_quote(l.type)
         << ", \"category\": " << json_quote(l.category) << ", \"details\": " << json_quote(l.details)
         << ", \"output_shape\": [";
      for (std::size_t d = 0; d < l.output_shape.rank(); ++d) os << (d ? ", " : "") << l.output_shape[d];
      os << "], \"ctc\": " << json_number(l.ctc) << ", \"batch\": " << workload_json(info, l.batch) << "}";
    }
    os << "\n  ]";
  }
  os << "\n}\n";
  return os.str();
}

std::string format_list(const std::string& format) {
  struct Row {
    const ModelEntry* entry;
    std::int64_t params;
  };
  std::vector<Row> rows;
  for (const auto& m : model_zoo()) rows.push_back({&m, build_model(m.name)->parameter_count()});
  std::ostringstream os;
  if (format == "csv") {
    os << "model,input,classes,parameters,description\n";
    for (const auto& r : rows)
      os << r.entry->name << "," << r.entry->default_input.str() << "," << r.entry->default_classes << "," << r.params
         << "," << csv_field(r.entry->description) << "\n";
  } else if (format == "json") {
    os << "[";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& e = *rows[i].entry;
      os << (i ? ",\n" : "\n") << "  {\"model\": " << json_quote(e.name) << ", \"input\": ["
         << e.default_input[0] << ", " << e.default_input[1] << ", " << e.default_input[2]
         << "], \"classes\": " << e.default_classes << ", \"parameters\": " << rows[i].params
         << ", \"description\": " << json_quote(e.description) << "}";
    }
    os << "\n]\n";
  } else {
    TextTable t(2, /*last_left=*/true);
    t.row({"model", "input", "classes", "parameters", "description"});
    t.rule();
    for (const auto& r : rows) {
      t.row({r.entry->name, r.entry->default_input.str(), std::to_string(r.entry->default_classes), grouped(r.params),
             r.entry->description});
    }
    os << t.str();
  }
  return os.str();
}

// --show-algos: what each convolution runs on a backend (cuDNN's choice under the run's policy).
int show_algorithms(const Graph& graph, std::int64_t batch, const ArgParser& p) {
  RunConfig run = run_config_from_flags(p);
  run.conv_algo_fallback = !p.get_flag("strict-algo");
  // The listing names each convolution's own algorithm: no fused epilogue or space-to-depth form
  // replaces one (model-info has neither flag).
  run.fuse_epilogue = false;
  run.space_to_depth = false;
  BackendOptions bo = run.backend_options();
  auto backend = create_backend(bo);
  FixedBatchWorkload work(graph, *backend, batch);
  work.step();  // the first forward/backward picks (and caches) every algorithm
  backend->synchronize();
  std::printf("%s on %s, batch %lld, %s, %s, policy %s\n\n", graph.model_name().c_str(), backend->device_name().c_str(),
              static_cast<long long>(batch), p.get("precision").c_str(), p.get("layout").c_str(),
              p.get("conv-algo").c_str());
  TextTable t(2);
  t.row({"layer", "forward", "backward data", "backward filter", "math", "workspace MiB"});
  t.rule();
  std::vector<std::string> notes;
  for (std::size_t i = 0; i < work.executor().num_layers(); ++i) {
    const Layer& layer = work.executor().layer(i);
    const auto a = layer.conv_algorithms();
    if (!a) continue;
    t.row({layer.name(), a->forward, a->backward_data.empty() ? "-" : a->backward_data, a->backward_filter, a->math_type,
           fixed(static_cast<double>(a->workspace_bytes) / (1024.0 * 1024.0), 1)});
    for (const auto& n : a->notes) notes.push_back(layer.name() + ": " + n);
  }
  std::fputs(t.str().c_str(), stdout);
  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
  const std::size_t fused = work.executor().memory().fused_relus;
  if (fused > 0)
    std::printf("fused: %zu ReLU layer(s) run inside the batch norm or add before them (no pass of their own)\n", fused);
  const std::size_t residuals = work.executor().memory().fused_residuals;
  const std::size_t masks = work.executor().memory().fused_residual_masks;
  if (residuals > 0)
    std::printf("fused: %zu residual add(s) run inside the batch norm before them (no forward pass of their own; "
                "%zu of their ReLU masks in that batch norm's backward)\n",
                residuals, masks);
  return 0;
}

}  // namespace

int run_model_info(const std::vector<std::string>& args) {
  ArgParser p("model-info",
              "Per-layer and total operations (Castro et al. 2019, Eqs. 1-7), forward/backward FLOPs, data\n"
              "read and written (Eqs. 8-9), CTC ratio and parameters of a built-in model, scaled to a batch\n"
              "(Eqs. 10-12).");
  p.positional("MODEL", "a built-in model (" + model_names_joined() + ") or an ONNX file (PATH.onnx, onnx:PATH)",
               /*required=*/false);
  p.option("batch", "batch size the totals are scaled to", "1");
  p.option("input", "input size of one sample, CxHxW (default: the model's own)");
  p.option("classes", "number of classes (default: the model's own)");
  p.option("dtype", "element type for byte counts", "fp32", {"fp32", "fp16", "bf16"});
  p.flag("summary", "totals only, no per-layer rows");
  p.flag("list", "list every built-in model with its default input and parameter count");
  p.flag("show-algos", "bind the model to --device at --batch and --precision, run one training step, and print "
                       "the convolution algorithm, math type and workspace every convolution layer uses");
  declare_device_flag(p, "used with --show-algos");
  p.option("precision", "with --show-algos: fp32, tf32, fp16 or bf16", "fp32", precision_names());
  p.option("layout", "with --show-algos: activation layout", "nchw", {"nchw", "nhwc"});
  p.option("conv-candidates", "graph_find / auto: engines of cuDNN's ranking timed per convolution (1-100; like PyTorch's cudnn benchmark_limit)", "10");
  p.option("algo-cache", kAlgoCacheHelp);
  p.option("conv-algo", "with --show-algos: algorithm policy (auto, find, heuristic, graph_find, graph_heuristic or a name, or own:NAME (the project's own kernels per layer: own:direct, own:im2col_gemm, own:implicit_gemm, own:fft, own:winograd, own:winograd_2x2; a layer one cannot run falls back to cuDNN auto with a note))", "auto");
  p.flag("strict-algo", "with --show-algos: a named algorithm a layer cannot run is an error, not a fallback");
  declare_output_flags(p, "the per-layer table");
  p.epilog(kConventions);
  if (!p.parse(args)) return 0;

  OutputSink sink(p);
  if (p.get_flag("list")) {
    if (p.get_optional("MODEL")) throw InvalidArgument("model-info: give either MODEL or --list, not both");
    if (!sink.machine()) std::fputs(format_list("table").c_str(), stdout);
    sink.finish_text(format_list("json"), format_list("csv"));
    return 0;
  }
  const auto model = p.get_optional("MODEL");
  if (!model) throw InvalidArgument("'cnnergy model-info' needs MODEL or --list (models: " + model_names_joined() + ")");
  std::optional<Shape> input;
  if (const auto text = p.get_optional("input")) input = parse_shape(*text);
  std::optional<std::int64_t> classes;
  if (p.get_optional("classes")) classes = p.get_int("classes", 2, std::int64_t{1} << 24);
  const std::int64_t batch = p.get_int("batch", 1, std::int64_t{1} << 24);
  const DType dtype = parse_dtype(p.get("dtype"));

  const std::unique_ptr<Graph> graph = build_model(*model, input, classes);
  if (p.get_flag("show-algos")) {
    if (sink.machine() || p.given("json") || p.given("csv"))
      throw NotSupported("model-info --show-algos prints a table only (no --format json/csv, --json or --csv)");
    return show_algorithms(*graph, batch, p);
  }
  const ModelInfo info = model_info(*graph, batch, dtype);
  const bool summary = p.get_flag("summary");
  if (!sink.machine()) std::fputs(format_table(info, summary).c_str(), stdout);
  sink.finish_text(format_json(info, summary), format_csv(info, summary));
  return 0;
}

}  // namespace cnnergy::cli
