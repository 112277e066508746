// open_dataset(): the one place that knows every data set kind and parses
// "KIND[:POSITIONAL][:k=v]..." specs. Explicit table, no self-registration; an unknown kind or
// option lists the known ones.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "data/cifar.hpp"
#include "data/dataset.hpp"
#include "data/idx.hpp"
#include "data/image_folder.hpp"
#include "data/synthetic.hpp"

namespace cnnergy::data {
namespace {

struct ParsedSpec {
  std::string kind;
  std::string positional;  // a directory, or the shape for synthetic
  std::map<std::string, std::string> options;
};

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

ParsedSpec parse_spec(const std::string& spec) {
  const std::vector<std::string> fields = split(spec, ':');
  if (fields.empty() || fields[0].empty())
    throw InvalidArgument("empty data set spec; kinds: " + join(dataset_kinds(), ", "));
  ParsedSpec parsed;
  parsed.kind = fields[0];
  std::transform(parsed.kind.begin(), parsed.kind.end(), parsed.kind.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  for (std::size_t i = 1; i < fields.size(); ++i) {
    const std::string& f = fields[i];
    const auto eq = f.find('=');
    if (eq == std::string::npos) {
      if (i != 1 || f.empty())
        throw InvalidArgument("data set spec '" + spec + "': field '" + f +
                              "' is neither the first positional field nor key=value");
      parsed.positional = f;
    } else {
      const std::string key = f.substr(0, eq);
      if (key.empty() || parsed.options.count(key))
        throw InvalidArgument("data set spec '" + spec + "': empty or repeated option '" + key +
                              "'");
      parsed.options[key] = f.substr(eq + 1);
    }
  }
  return parsed;
}

void check_keys(const ParsedSpec& p, const std::set<std::string>& allowed) {
  for (const auto& [key, value] : p.options)
    if (!allowed.count(key))
      throw InvalidArgument(
          "unknown option '" + key + "' for data set kind " + p.kind + "; known: " +
          (allowed.empty() ? std::string("none")
                           : join(std::vector<std::string>(allowed.begin(), allowed.end()), ", ")));
}

std::int64_t parse_int(const std::string& key, const std::string& text, std::int64_t min_value) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min_value)
    throw InvalidArgument("option " + key + "=" + text +
                          ": expected an integer >= " + std::to_string(min_value));
  return v;
}

double parse_double(const std::string& key, const std::string& text) {
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw InvalidArgument("option " + key + "=" + text + ": expected a number");
}

std::vector<float> parse_floats(const std::string& key, const std::string& text) {
  std::vector<float> out;
  for (const std::string& part : split(text, ','))
    out.push_back(static_cast<float>(parse_double(key, part)));
  if (out.size() != 1 && out.size() != 3)
    throw InvalidArgument("option " + key + "=" + text +
                          ": expected 1 or 3 comma-separated numbers");
  return out;
}

std::string option_or(const ParsedSpec& p, const std::string& key, const std::string& fallback) {
  const auto it = p.options.find(key);
  return it == p.options.end() ? fallback : it->second;
}

// limit= and test_limit=, valid for every kind.
void apply_limits(const ParsedSpec& p, DatasetSplits& splits) {
  if (p.options.count("limit"))
    splits.train = take_first(splits.train, parse_int("limit", p.options.at("limit"), 1));
  if (p.options.count("test_limit")) {
    if (!splits.test)
      throw InvalidArgument("test_limit= given but " + splits.train->name() + " has no test split");
    splits.test = take_first(splits.test, parse_int("test_limit", p.options.at("test_limit"), 1));
  }
}

DatasetSplits open_idx_kind(const ParsedSpec& p) {
  check_keys(p, {"limit", "test_limit"});
  if (p.kind == "fashion-mnist")
    return open_idx_directory(p.positional.empty() ? kFashionMnistDefaultDir : p.positional,
                              "fashion-mnist", fashion_mnist_normalisation());
  if (p.positional.empty())
    throw InvalidArgument("mnist needs its directory: mnist:/path/to/idx/files");
  return open_idx_directory(p.positional, "mnist", mnist_normalisation());
}

DatasetSplits open_cifar_kind(const ParsedSpec& p) {
  check_keys(p, {"limit", "test_limit"});
  if (p.positional.empty())
    throw InvalidArgument("cifar10 needs its directory: cifar10:/path/to/cifar-10-batches-bin");
  return open_cifar10_directory(p.positional, cifar10_normalisation());
}

DatasetSplits open_folder_kind(const ParsedSpec& p) {
  check_keys(p, {"limit", "test_limit", "crop", "resize", "mean", "std", "holdout", "seed"});
  if (p.positional.empty())
    throw InvalidArgument("folder needs its root directory: folder:/path/to/images");
  ImageFolderOptions o;
  o.crop = static_cast<int>(parse_int("crop", option_or(p, "crop", "224"), 1));
  const std::string resize = option_or(p, "resize", "256x256");
  if (const auto x = resize.find('x'); x != std::string::npos) {
    o.resize_width = static_cast<int>(parse_int("resize", resize.substr(0, x), 1));
    o.resize_height = static_cast<int>(parse_int("resize", resize.substr(x + 1), 1));
  } else {
    o.resize_shorter = static_cast<int>(parse_int("resize", resize, 1));
  }
  if (p.options.count("mean")) o.normalisation.mean = parse_floats("mean", p.options.at("mean"));
  if (p.options.count("std")) o.normalisation.stddev = parse_floats("std", p.options.at("std"));
  const double holdout =
      p.options.count("holdout") ? parse_double("holdout", p.options.at("holdout")) : 0.0;
  const auto seed = static_cast<std::uint64_t>(parse_int("seed", option_or(p, "seed", "1"), 0));
  return open_image_folder_splits(p.positional, o, holdout, seed);
}

DatasetSplits open_synthetic_kind(const ParsedSpec& p) {
  check_keys(p, {"limit", "test_limit", "classes", "size", "test_size", "labels", "noise", "seed"});
  if (p.positional.empty())
    throw InvalidArgument(
        "synthetic needs a sample shape: synthetic:CxHxW (e.g. synthetic:3x224x224)");
  SyntheticOptions o;
  o.sample_shape = parse_shape(p.positional);
  if (o.sample_shape.rank() != 3)
    throw InvalidArgument("synthetic sample shape must be CxHxW, got " + o.sample_shape.str());
  o.num_classes = parse_int("classes", option_or(p, "classes", "10"), 1);
  o.size = parse_int("size", option_or(p, "size", "10000"), 1);
  const std::int64_t test_size = parse_int(
      "test_size", option_or(p, "test_size", std::to_string(std::max<std::int64_t>(1, o.size / 5))),
      1);
  const std::string labels = option_or(p, "labels", "learnable");
  if (labels != "learnable" && labels != "random")
    throw InvalidArgument("option labels=" + labels + ": expected learnable or random");
  o.learnable = labels == "learnable";
  o.noise = static_cast<float>(parse_double("noise", option_or(p, "noise", "1")));
  o.seed = static_cast<std::uint64_t>(parse_int("seed", option_or(p, "seed", "1"), 0));
  return make_synthetic_splits(o, test_size);
}

}  // namespace

std::vector<std::string> dataset_kinds() {
  return {"fashion-mnist", "mnist", "cifar10", "folder", "synthetic"};
}

std::string dataset_spec_help() {
  return "  fashion-mnist[:DIR]     IDX files (.gz or raw); DIR defaults to " +
         std::string(kFashionMnistDefaultDir) +
         "\n"
         "  mnist:DIR               IDX files of MNIST\n"
         "  cifar10:DIR             data_batch_1..5.bin and test_batch.bin\n"
         "  "
         "folder:DIR[:crop=224][:resize=256x256|256][:mean=R,G,B][:std=R,G,B][:holdout=F][:seed=N]"
         "\n"
         "                          DIR/CLASS/*.jpg|png, or DIR/train + DIR/val\n"
         "  "
         "synthetic:CxHxW[:classes=10][:size=10000][:test_size=N][:labels=learnable|random][:noise="
         "1][:seed=1]\n"
         "  every kind also takes :limit=N (training samples) and :test_limit=N\n";
}

DatasetSplits open_dataset(const std::string& spec) {
  const ParsedSpec p = parse_spec(spec);
  DatasetSplits splits;
  if (p.kind == "fashion-mnist" || p.kind == "mnist") {
    splits = open_idx_kind(p);
  } else if (p.kind == "cifar10" || p.kind == "cifar-10") {
    splits = open_cifar_kind(p);
  } else if (p.kind == "folder") {
    splits = open_folder_kind(p);
  } else if (p.kind == "synthetic") {
    splits = open_synthetic_kind(p);
  } else {
    throw InvalidArgument("unknown data set kind '" + p.kind + "' in '" + spec +
                          "'; kinds: " + join(dataset_kinds(), ", "));
  }
  apply_limits(p, splits);
  splits.spec = spec;
  return splits;
}

}  // namespace cnnergy::data
