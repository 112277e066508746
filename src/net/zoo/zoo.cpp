// The model registry: one explicit table of every built-in network (no static self-registration),
// and the checked entry points that build a model by name with optional overrides.
#include "net/zoo/zoo.hpp"

#include "core/errors.hpp"
#include "net/graph.hpp"
#include "net/onnx/onnx_import.hpp"
#include "net/zoo/families.hpp"

namespace cnnergy {
namespace {

// Bounds on overrides: far beyond any real network, small enough that element counts (products of
// these) cannot overflow 64 bits.
constexpr std::int64_t kMaxInputDim = 1 << 16;
constexpr std::int64_t kMaxClasses = 1 << 24;

}  // namespace

const std::vector<ModelEntry>& model_zoo() {
  static const std::vector<ModelEntry> zoo = {
      {"lenet5", "LeNet-5 as Caffe's MNIST example (conv20-pool-conv50-pool-fc500-relu-fc)", Shape{1, 28, 28}, 10,
       &zoo::lenet5},
      {"alexnet", "AlexNet, torchvision single-tower 'one weird trick' variant, no LRN", Shape{3, 224, 224}, 1000,
       &zoo::alexnet},
      {"caffenet", "BVLC reference CaffeNet: pool before LRN, group-2 conv2/4/5 (Castro et al. 2019)",
       Shape{3, 227, 227}, 1000, &zoo::caffenet},
      {"overfeat", "OverFeat fast model (Sermanet et al. 2014)", Shape{3, 231, 231}, 1000, &zoo::overfeat},
      {"vgg16", "VGG-16 (configuration D), torchvision, no batch norm", Shape{3, 224, 224}, 1000, &zoo::vgg16},
      {"vgg19", "VGG-19 (configuration E), torchvision, no batch norm", Shape{3, 224, 224}, 1000, &zoo::vgg19},
      {"googlenet", "GoogLeNet / Inception v1, torchvision (batch norm, 3x3 '5x5' branch), no aux heads",
       Shape{3, 224, 224}, 1000, &zoo::googlenet},
      {"inception_v3", "Inception v3, torchvision, batch norm, no auxiliary head", Shape{3, 299, 299}, 1000,
       &zoo::inception_v3},
      {"inception_v4", "Inception v4, timm/Cadene layout, batch norm", Shape{3, 299, 299}, 1000,
       &zoo::inception_v4},
      {"resnet34", "ResNet-34, torchvision (the network Castro et al. 2019 cite for ResNetIm)", Shape{3, 224, 224},
       1000, &zoo::resnet34},
      {"resnetim", "ResNetIm as Castro et al. 2019 describe it: adapter convolutions, 3/4/6/3 blocks, no batch norm",
       Shape{3, 224, 224}, 1000, &zoo::resnetim},
      {"resnet50", "ResNet-50 v1.5, torchvision", Shape{3, 224, 224}, 1000, &zoo::resnet50},
      {"resnet152", "ResNet-152 v1.5, torchvision", Shape{3, 224, 224}, 1000, &zoo::resnet152},
      {"gait_2dcnn", "gait 2D-CNN of Castro et al. 2019 on 50x60x60 optical-flow volumes (TUM-GAID, 155 subjects)",
       Shape{50, 60, 60}, 155, &zoo::gait_2dcnn},
      {"gait_resnet", "gait ResNet of Castro et al. 2019 (4/6/7/2 basic blocks) on 50x60x60 optical flow",
       Shape{50, 60, 60}, 155, &zoo::gait_resnet},
  };
  return zoo;
}

std::string model_names_joined() {
  std::string names;
  for (const auto& m : model_zoo()) names += (names.empty() ? "" : ", ") + m.name;
  return names;
}

const ModelEntry& find_model(std::string_view name) {
  for (const auto& m : model_zoo())
    if (m.name == name) return m;
  throw InvalidArgument("unknown model '" + std::string(name) + "'; known models: " + model_names_joined() +
                        ", or an ONNX file (PATH.onnx or onnx:PATH)");
}

GraphBuilder describe_model(std::string_view name, const std::optional<Shape>& input_per_sample,
                            std::optional<std::int64_t> num_classes) {
  if (is_onnx_model_name(name)) {
    OnnxImportOptions options;
    options.input = input_per_sample;
    options.classes = num_classes;
    return import_onnx_file(onnx_path_of(name), options).builder;
  }
  const ModelEntry& entry = find_model(name);
  const Shape input = input_per_sample.value_or(entry.default_input);
  if (input.rank() != 3)
    throw InvalidArgument("model " + entry.name + ": input must be CxHxW (3 dimensions), got '" + input.str() + "'");
  for (const auto d : input.dims())
    if (d <= 0 || d > kMaxInputDim)
      throw InvalidArgument("model " + entry.name + ": input '" + input.str() + "' needs every dimension in 1.." +
                            std::to_string(kMaxInputDim));
  const std::int64_t classes = num_classes.value_or(entry.default_classes);
  if (classes < 2 || classes > kMaxClasses)
    throw InvalidArgument("model " + entry.name + ": class count " + std::to_string(classes) + " is not in 2.." +
                          std::to_string(kMaxClasses));
  return entry.build(input, classes);
}

std::unique_ptr<Graph> build_model_init(std::string_view name, const std::optional<Shape>& input_per_sample,
                                        std::optional<std::int64_t> num_classes, std::string_view init) {
  if (init != "file" && init != "random")
    throw InvalidArgument("--init must be 'file' or 'random', got '" + std::string(init) + "'");
  if (init == "file") return build_model(name, input_per_sample, num_classes);
  if (!is_onnx_model_name(name))
    throw InvalidArgument("--init random applies to ONNX models; zoo model '" + std::string(name) +
                          "' is always initialised from the seed");
  OnnxImportOptions options;
  options.input = input_per_sample;
  options.classes = num_classes;
  options.random_init = true;
  return import_onnx_file(onnx_path_of(name), options).builder.build();
}

std::unique_ptr<Graph> build_model(std::string_view name, const std::optional<Shape>& input_per_sample,
                                   std::optional<std::int64_t> num_classes) {
  return describe_model(name, input_per_sample, num_classes).build();
}

}  // namespace cnnergy
