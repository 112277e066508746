// Problem sources of the convolution study: strict --problem parsing (every bad value names its key),
// the geometry rules that become cell statuses, the li2016 preset and its memory scale, and a
// model's distinct convolutions with the layers that share each.
#include <gtest/gtest.h>

#include <set>

#include "convbench/problem.hpp"
#include "core/errors.hpp"
#include "net/graph.hpp"
#include "net/zoo/zoo.hpp"

namespace cnnergy::convbench {
namespace {

// The InvalidArgument message of parse_problem(text) ("" when it parses).
std::string parse_error(const std::string& text) {
  try {
    parse_problem(text);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return {};
}

TEST(ConvbenchProblem, ParsesEveryKeyAndDefaults) {
  const ConvProblem p = parse_problem("n=128,c=64,h=56,w=57,k=32,r=3,s=5,stride=2,pad=1,groups=4,dilation=2");
  EXPECT_EQ(p.desc.n, 128);
  EXPECT_EQ(p.desc.c, 64);
  EXPECT_EQ(p.desc.h, 56);
  EXPECT_EQ(p.desc.w, 57);
  EXPECT_EQ(p.desc.k, 32);
  EXPECT_EQ(p.desc.r, 3);
  EXPECT_EQ(p.desc.s, 5);
  EXPECT_EQ(p.desc.stride_h, 2);
  EXPECT_EQ(p.desc.stride_w, 2);
  EXPECT_EQ(p.desc.pad_top, 1);
  EXPECT_EQ(p.desc.pad_right, 1);
  EXPECT_EQ(p.desc.groups, 4);
  EXPECT_EQ(p.desc.dilation_w, 2);
  EXPECT_FALSE(p.desc.bias);
  EXPECT_EQ(p.id, "n=128,c=64,h=56,w=57,k=32,r=3,s=5,stride=2,pad=1,groups=4,dilation=2");
  const ConvProblem d = parse_problem(" n=2 , c=3,h=8,w=8,k=4,r=3,s=3 ");
  EXPECT_EQ(d.desc.stride_h, 1);
  EXPECT_EQ(d.desc.pad_top, 0);
  EXPECT_EQ(d.desc.groups, 1);
  EXPECT_EQ(d.desc.dilation_h, 1);
  EXPECT_EQ(d.id, "n=2,c=3,h=8,w=8,k=4,r=3,s=3,stride=1,pad=0");
  EXPECT_EQ(parse_problem(d.id).id, d.id);  // the id parses back to itself
}

TEST(ConvbenchProblem, BadTextNamesTheKey) {
  EXPECT_NE(parse_error("n=1,c=1,h=8,w=8,k=1,r=3,s=3,q=2").find("unknown key 'q'"), std::string::npos);
  EXPECT_NE(parse_error("n=1,n=2,c=1,h=8,w=8,k=1,r=3,s=3").find("'n' given twice"), std::string::npos);
  EXPECT_NE(parse_error("n=1,c=1,h=8,w=8,k=1,r=3").find("missing key 's'"), std::string::npos);
  EXPECT_NE(parse_error("n=1,c=1,h=8x,w=8,k=1,r=3,s=3").find("h='8x'"), std::string::npos);
  EXPECT_NE(parse_error("n=0,c=1,h=8,w=8,k=1,r=3,s=3").find("n=0 must be >= 1"), std::string::npos);
  EXPECT_NE(parse_error("n=1,c=1,h=8,w=8,k=1,r=3,s=3,pad=-1").find("pad=-1 must be >= 0"), std::string::npos);
  EXPECT_NE(parse_error("n=1,c=1,h=8,w=8,k=1,r=3,s=3,stride=").find("stride=''"), std::string::npos);
  EXPECT_NE(parse_error("n=1,,c=1").find("empty item"), std::string::npos);
  EXPECT_NE(parse_error("n=1,c").find("not key=value"), std::string::npos);
  EXPECT_NE(parse_error("").find("empty"), std::string::npos);
  EXPECT_NE(parse_error("n=99999999999,c=1,h=8,w=8,k=1,r=3,s=3").find("out of range"), std::string::npos);
}

TEST(ConvbenchProblem, ImpossibleGeometryParsesAndStatesItsRule) {
  const ConvProblem big = parse_problem("n=1,c=1,h=4,w=4,k=1,r=7,s=7");  // kernel larger than the input
  const auto rule = problem_rule(big.desc);
  ASSERT_TRUE(rule.has_value());
  EXPECT_NE(rule->find("empty output"), std::string::npos) << *rule;
  EXPECT_NE(rule->find("4x4"), std::string::npos) << *rule;
  // Padding makes the same kernel fit; dilation can make a small kernel too wide.
  EXPECT_FALSE(problem_rule(parse_problem("n=1,c=1,h=4,w=4,k=1,r=7,s=7,pad=2").desc).has_value());
  EXPECT_TRUE(problem_rule(parse_problem("n=1,c=1,h=4,w=4,k=1,r=3,s=3,dilation=3").desc).has_value());
  const auto groups = problem_rule(parse_problem("n=1,c=6,h=4,w=4,k=4,r=1,s=1,groups=4").desc);
  ASSERT_TRUE(groups.has_value());
  EXPECT_NE(groups->find("groups=4"), std::string::npos);
}

TEST(ConvbenchProblem, Li2016PresetIsTableOneScaledToMemory) {
  const auto p = preset_problems("li2016", 1);
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(p[0].id, "n=128,c=3,h=128,w=128,k=96,r=11,s=11,stride=1,pad=0");  // Conv1 (128,128,96,11,1)
  EXPECT_EQ(p[4].id, "n=128,c=384,h=13,w=13,k=384,r=3,s=3,stride=1,pad=0");  // Conv5 (128,13,384,3,1)
  for (const auto& q : p) EXPECT_FALSE(problem_rule(q.desc).has_value()) << q.id;
  EXPECT_EQ(preset_problems("li2016", 4)[2].desc.n, 512);
  EXPECT_EQ(li2016_memory_scale(0), 1);
  EXPECT_EQ(li2016_memory_scale(std::size_t{12'000'000'000}), 1);
  EXPECT_EQ(li2016_memory_scale(std::size_t{24'000'000'000}), 2);
  EXPECT_EQ(li2016_memory_scale(std::size_t{85'000'000'000}), 4);   // an 80 GB H100
  EXPECT_EQ(li2016_memory_scale(std::size_t{150'000'000'000}), 8);  // a 141 GB H200
  EXPECT_THROW(preset_problems("li2017", 1), InvalidArgument);
}

TEST(ConvbenchProblem, ModelProblemsNameEveryConvolutionOnce) {
  const auto problems = model_problems("resnet50", 8);
  const auto graph = build_model("resnet50");
  std::size_t convs = 0;
  for (std::size_t i = 0; i < graph->num_layers(); ++i) convs += graph->layer(i).conv_problem() ? 1 : 0;
  std::set<std::string> named, ids;
  bool shared = false;
  for (const auto& p : problems) {
    EXPECT_EQ(p.desc.n, 8);
    EXPECT_TRUE(ids.insert(p.id).second) << "problem listed twice: " << p.id;
    shared = shared || p.layers.size() > 1;
    for (const auto& l : p.layers) EXPECT_TRUE(named.insert(l).second) << l << " in two problems";
  }
  EXPECT_EQ(named.size(), convs);
  EXPECT_LT(problems.size(), convs);  // ResNet-50 repeats its bottleneck convolutions
  EXPECT_TRUE(shared);
  // The stem reads the network input: no data gradient is needed there.
  EXPECT_EQ(problems.front().layers.front(), "conv1");
  EXPECT_FALSE(problems.front().backward_data_used);
  EXPECT_EQ(problems.front().id, "n=8,c=3,h=224,w=224,k=64,r=7,s=7,stride=2,pad=3");
  EXPECT_THROW(model_problems("no_such_model", 8), InvalidArgument);
}

TEST(ConvbenchProblem, FlopsAndBytes) {
  const ConvProblem p = parse_problem("n=2,c=4,h=6,w=6,k=8,r=3,s=3,pad=1,groups=2");
  EXPECT_DOUBLE_EQ(problem_flops(p.desc), 2.0 * 2 * 8 * 2 * 3 * 3 * 6 * 6);
  EXPECT_EQ(problem_tensor_bytes(p.desc, 4), static_cast<std::size_t>(2 * 4 * 36 + 2 * 8 * 36 + 8 * 2 * 9) * 4);
}

}  // namespace
}  // namespace cnnergy::convbench
