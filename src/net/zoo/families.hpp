// One builder function per built-in network (one .cpp per family). Each describes the network for
// any input size and class count; the registry in zoo.cpp pairs them with names and defaults.
#pragma once

#include <cstdint>

#include "core/shape.hpp"
#include "net/graph_builder.hpp"

namespace cnnergy::zoo {

GraphBuilder lenet5(const Shape& input, std::int64_t classes);        // lenet5.cpp
GraphBuilder alexnet(const Shape& input, std::int64_t classes);       // alexnet.cpp
GraphBuilder caffenet(const Shape& input, std::int64_t classes);      // caffenet.cpp
GraphBuilder overfeat(const Shape& input, std::int64_t classes);      // overfeat.cpp
GraphBuilder vgg16(const Shape& input, std::int64_t classes);         // vgg.cpp
GraphBuilder vgg19(const Shape& input, std::int64_t classes);         // vgg.cpp
GraphBuilder googlenet(const Shape& input, std::int64_t classes);     // googlenet.cpp
GraphBuilder inception_v3(const Shape& input, std::int64_t classes);  // inception_v3.cpp
GraphBuilder inception_v4(const Shape& input, std::int64_t classes);  // inception_v4.cpp
GraphBuilder resnet34(const Shape& input, std::int64_t classes);      // resnet.cpp
GraphBuilder resnetim(const Shape& input, std::int64_t classes);      // resnet.cpp
GraphBuilder resnet50(const Shape& input, std::int64_t classes);      // resnet.cpp
GraphBuilder resnet152(const Shape& input, std::int64_t classes);     // resnet.cpp
GraphBuilder gait_2dcnn(const Shape& input, std::int64_t classes);    // gait.cpp
GraphBuilder gait_resnet(const Shape& input, std::int64_t classes);   // gait.cpp

}  // namespace cnnergy::zoo
