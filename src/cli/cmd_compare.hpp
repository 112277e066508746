// `cnnergy compare`: result sets from several databases side by side (report/compare.hpp).
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_compare(const std::vector<std::string>& args);

}  // namespace cnnergy::cli
