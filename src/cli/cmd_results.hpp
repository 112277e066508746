// Commands on results databases: `cnnergy merge OUT.db IN.db...` (join shards and runs),
// `cnnergy export DB --csv FILE --json FILE`, and `cnnergy report DB -o report.html` (terminal tables
// with the optimum per metric, plus the self-contained HTML report).
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_merge(const std::vector<std::string>& args);
int run_export(const std::vector<std::string>& args);
int run_report(const std::vector<std::string>& args);

}  // namespace cnnergy::cli
