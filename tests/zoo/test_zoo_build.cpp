// Every zoo model builds at its default input with exactly the parameter count of its published
// reference, its logits are (N, classes), and bad requests fail with the documented error types.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "core/errors.hpp"
#include "net/graph.hpp"
#include "net/zoo/zoo.hpp"

namespace cnnergy {
namespace {

// Reference parameter counts (trained parameters: weights, biases, batch-norm gamma/beta; running
// statistics excluded), at each model's default input and class count.
const std::map<std::string, std::int64_t>& reference_params() {
  static const std::map<std::string, std::int64_t> ref = {
      // Caffe examples/mnist/lenet_train_test.prototxt: 20*1*25+20 + 50*20*25+50 + 800*500+500 + 500*10+10.
      {"lenet5", 431080},
      // torchvision.models.alexnet(): sum(p.numel() for p in model.parameters()) (torchvision docs).
      {"alexnet", 61100840},
      // BVLC bvlc_reference_caffenet (group 2 in conv2/4/5), the sum over its blobs.
      {"caffenet", 60965224},
      // OverFeat fast (Sermanet et al. 2014, Table 1; the paper rounds to 145 M):
      // 34944 + 614656 + 1180160 + 4719616 + 9438208 + 113250304 + 12587008 + 4097000.
      {"overfeat", 145920872},
      // torchvision vgg16 / vgg19 (torchvision docs, "num_params").
      {"vgg16", 138357544},
      {"vgg19", 143667240},
      // torchvision googlenet(aux_logits=False) (torchvision docs: 6,624,904).
      {"googlenet", 6624904},
      // torchvision inception_v3: 27,161,264 with the aux head (docs) minus the aux head's
      // 98,560 + 2,459,136 + 769,000 = 3,326,696 parameters.
      {"inception_v3", 23834568},
      // timm / Cadene pretrainedmodels inception_v4 (42.68 M in timm's model card).
      {"inception_v4", 42679816},
      // torchvision resnet34 / resnet50 / resnet152 (torchvision docs).
      {"resnet34", 21797672},
      // resnetim (Castro et al. 2019's text, see resnet.cpp), by hand, biases included, no batch norm:
      // conv1 3*64*49+64 = 9472; adapters 9*(64*64 + 64*128 + 128*256 + 256*512) + (64+128+256+512)
      //   = 1585152 + 960; blocks 2*3*(9*64*64+64) + 2*4*(9*128*128+128) + 2*6*(9*256*256+256)
      //   + 2*3*(9*512*512+512) = 221568 + 1180672 + 7080960 + 14158848; fc 512*1000+1000 = 513000.
      {"resnetim", 9472 + 1585152 + 960 + 221568 + 1180672 + 7080960 + 14158848 + 513000},
      {"resnet50", 25557032},
      {"resnet152", 60192808},
      // gait_2dcnn (Castro et al. 2019 Sec. 4.1 in its Table 1 reading, 155 classes), by hand:
      // conv1 50*96*49+96 = 235296; conv2 96*192*25+192 = 460992; conv3 192*512*9+512 = 885248;
      // conv4 (= full5) 512*4096*4+4096 = 8392704; full6 4096*2048+2048 = 8390656;
      // fc_out 2048*155+155 = 317595.
      {"gait_2dcnn", 235296 + 460992 + 885248 + 8392704 + 8390656 + 317595},
      // gait_resnet (see gait.cpp), by hand: conv1 50*64*49 + BN 128 = 156928;
      // adapters 9*(64*64 + 64*128 + 128*256 + 256*512) + BN 2*(64+128+256+512) = 1585152 + 1920;
      // blocks 2 convs + 2 BN each: 4*2*(9*64*64+128) + 6*2*(9*128*128+256) + 7*2*(9*256*256+512)
      //   + 2*2*(9*512*512+1024) = 295936 + 1772544 + 8264704 + 9441280; fc 512*155+155 = 79515.
      {"gait_resnet", 156928 + 1585152 + 1920 + 295936 + 1772544 + 8264704 + 9441280 + 79515},
  };
  return ref;
}

TEST(Zoo, HasTheFifteenModelsWithReferences) {
  EXPECT_EQ(model_zoo().size(), 15u);
  for (const auto& m : model_zoo()) EXPECT_TRUE(reference_params().count(m.name)) << m.name;
}

TEST(Zoo, ParameterCountsMatchReferences) {
  for (const auto& m : model_zoo()) {
    SCOPED_TRACE(m.name);
    const auto graph = build_model(m.name);
    EXPECT_EQ(graph->parameter_count(), reference_params().at(m.name));
    EXPECT_EQ(graph->total_workload().parameters, graph->parameter_count());
    EXPECT_EQ(graph->input_per_sample(), m.default_input);
    EXPECT_EQ(graph->num_classes(), m.default_classes);
    EXPECT_EQ(graph->tensor(graph->logits_tensor()).shape, (Shape{1, m.default_classes}));
    EXPECT_EQ(graph->model_name(), m.name);
  }
}

TEST(Zoo, OverridesChangeInputAndClasses) {
  // ResNet-50 with 10 classes: only fc changes, 2048*1000+1000 -> 2048*10+10.
  const auto r = build_model("resnet50", Shape{3, 128, 128}, 10);
  EXPECT_EQ(r->parameter_count(), 25557032 - (2048 * 1000 + 1000) + (2048 * 10 + 10));
  EXPECT_EQ(r->tensor(r->logits_tensor()).shape, (Shape{1, 10}));
  EXPECT_EQ(r->input_per_sample(), (Shape{3, 128, 128}));
  // The gait networks with TUM-GAID's 150 training subjects instead of 155 test subjects.
  const auto g = build_model("gait_2dcnn", std::nullopt, 150);
  EXPECT_EQ(g->parameter_count(), reference_params().at("gait_2dcnn") - 5 * (2048 + 1));
  // A grayscale VGG: only the first convolution's weights change (3 -> 1 input channel).
  const auto v = build_model("vgg16", Shape{1, 224, 224});
  EXPECT_EQ(v->parameter_count(), 138357544 - 2 * 64 * 9);
}

TEST(Zoo, UnknownModelListsEveryName) {
  try {
    build_model("resnet51");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("resnet51"), std::string::npos) << msg;
    for (const auto& m : model_zoo()) EXPECT_NE(msg.find(m.name), std::string::npos) << m.name << ": " << msg;
  }
}

TEST(Zoo, InputThatEmptiesALayerNamesTheLayer) {
  // VGG-16 halves the map five times: at 16x16 the fifth pool ("features.30") gets 1x1 and its
  // 2x2 window leaves nothing.
  try {
    build_model("vgg16", Shape{3, 16, 16});
    FAIL() << "no exception";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("features.30"), std::string::npos) << e.what();
  }
  // CaffeNet's 11x11 first convolution cannot run on 8x8.
  try {
    build_model("caffenet", Shape{3, 8, 8});
    FAIL() << "no exception";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("conv1"), std::string::npos) << e.what();
  }
  // The gait 2D-CNN needs 60x60 to reach conv4 (2x2) with a 2x2 map: 59x59 ends at pool3 with 1x1.
  EXPECT_THROW(build_model("gait_2dcnn", Shape{50, 59, 59}), ShapeError);
  EXPECT_NO_THROW(build_model("gait_2dcnn", Shape{50, 60, 60}));
}

TEST(Zoo, BadOverridesAreUsageErrors) {
  EXPECT_THROW(build_model("lenet5", Shape{28, 28}), InvalidArgument);          // not C x H x W
  EXPECT_THROW(build_model("lenet5", Shape{1, 28, 28, 1}), InvalidArgument);
  EXPECT_THROW(build_model("lenet5", Shape{1, 0, 28}), InvalidArgument);        // empty dimension
  EXPECT_THROW(build_model("lenet5", Shape{1, 28, 28}, 1), InvalidArgument);    // one class
  EXPECT_THROW(build_model("lenet5", Shape{1, 28, 28}, 0), InvalidArgument);
  EXPECT_THROW(build_model("lenet5", Shape{1, 1 << 17, 28}), InvalidArgument);  // beyond the bound
  EXPECT_NO_THROW(build_model("lenet5", Shape{1, 32, 32}, 2));
}

TEST(Zoo, FindModelAndNames) {
  EXPECT_EQ(find_model("caffenet").default_input, (Shape{3, 227, 227}));
  EXPECT_EQ(find_model("inception_v3").default_input, (Shape{3, 299, 299}));
  EXPECT_EQ(find_model("gait_resnet").default_input, (Shape{50, 60, 60}));
  EXPECT_EQ(find_model("gait_resnet").default_classes, 155);
  EXPECT_THROW(find_model(""), InvalidArgument);
  EXPECT_THROW(find_model("ResNet50"), InvalidArgument);  // names are exact
  const std::string names = model_names_joined();
  for (const auto& m : model_zoo()) EXPECT_NE(names.find(m.name), std::string::npos);
}

}  // namespace
}  // namespace cnnergy
