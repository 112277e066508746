// The heading a person reads for a sweep ("ResNet-34 on NVIDIA H100 80GB HBM3: batch x precision,
// 6 trials"), built from the stored definition, the environment and the trials. The raw definition
// (workload, knob space, settings) stays in the report's environment table.
#pragma once

#include <string>

#include "report/sweep_data.hpp"

namespace cnnergy::report {

// "<what> on <where>: <varying knobs joined by ' x '>, <N> trial(s)"; plain text (escape it for HTML).
std::string sweep_title(const SweepData& d);

// A built-in model's name as papers write it ("resnet34" -> "ResNet-34"); other names unchanged.
std::string model_display_name(const std::string& name);

}  // namespace cnnergy::report
