// read_job_map: one directory listing and one small read per GPU file, at every scrape.
#include "exporter/job_map.hpp"

#include <filesystem>
#include <fstream>

namespace cnnergy::exporter {

JobIds read_job_map(const std::string& dir) {
  JobIds out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.size() > 4 || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(it->path());
    std::string job;
    if (!std::getline(in, job)) continue;
    while (!job.empty() && (job.back() == '\r' || job.back() == ' ' || job.back() == '\t')) job.pop_back();
    if (!job.empty()) out[static_cast<unsigned>(std::stoul(name))] = job;
  }
  return out;
}

}  // namespace cnnergy::exporter
