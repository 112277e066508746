// What every communicator shares: the agreement check run before training (same model, batch,
// precision on every rank), a host-clock event for synchronous collectives, and the node name.
#include "train/parallel/communicator.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "core/errors.hpp"

namespace cnnergy::dist {

std::string Communicator::host_name() const {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

namespace {

std::vector<std::string> fields(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t pos; (pos = s.find("; ", start)) != std::string::npos; start = pos + 2)
    out.push_back(s.substr(start, pos - start));
  out.push_back(s.substr(start));
  return out;
}

}  // namespace

void agree(Communicator& comm, const std::string& what, const std::string& value) {
  const std::vector<std::string> all = comm.all_gather(value);
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    // Values made of "; "-separated fields: name only the fields that differ.
    std::string mine = all[0], theirs = all[r];
    const auto a = fields(all[0]), b = fields(all[r]);
    if (a.size() == b.size()) {
      mine.clear();
      theirs.clear();
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i] == b[i]) continue;
        mine += (mine.empty() ? "" : "; ") + a[i];
        theirs += (theirs.empty() ? "" : "; ") + b[i];
      }
    }
    throw InvalidArgument("ranks disagree on the " + what + ": rank 0 has '" + mine + "', rank " +
                          std::to_string(r) + " has '" + theirs +
                          "' (every rank must run the same model, batch, precision and data)");
  }
}

std::string format_seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", seconds);
  return text;
}

double all_reduce_host_sum(Communicator& comm, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g", value);
  double sum = 0;
  for (const std::string& s : comm.all_gather(text)) sum += std::strtod(s.c_str(), nullptr);
  return sum;
}

namespace {

class HostEvent final : public DeviceEvent {
 public:
  void record() override { time_ = std::chrono::steady_clock::now(); }
  void synchronize() override {}
  bool ready() const override { return true; }
  double elapsed_ms(const DeviceEvent& since) const override {
    const auto* start = dynamic_cast<const HostEvent*>(&since);
    if (!start) throw InternalError("a host event can only be compared with another host event");
    return std::chrono::duration<double, std::milli>(time_ - start->time_).count();
  }

 private:
  std::chrono::steady_clock::time_point time_{};
};

}  // namespace

std::unique_ptr<DeviceEvent> make_host_event() {
  auto e = std::make_unique<HostEvent>();
  e->record();
  return e;
}

namespace {

class SoloCommunicator final : public Communicator {
 public:
  explicit SoloCommunicator(const CommOptions& options) : options_(options) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string kind() const override { return "solo"; }
  const CommOptions& options() const override { return options_; }
  void all_reduce_sum(const Tensor& t) override { require(t); }
  void broadcast(const Tensor& t, int root) override {
    require(t);
    if (root != 0)
      throw InvalidArgument("broadcast root " + std::to_string(root) + " in a group of one");
  }
  std::unique_ptr<DeviceEvent> record_comm_event() override { return make_host_event(); }
  void barrier() override {}
  std::vector<std::string> all_gather(const std::string& mine) override { return {mine}; }
  void abort(const std::string& reason) override {
    if (!failure_) failure_ = reason;
  }
  std::optional<std::string> failure() const override { return failure_; }

 private:
  static void require(const Tensor& t) {
    if (!t.defined()) throw InvalidArgument("collective on an undefined tensor");
  }
  CommOptions options_;
  std::optional<std::string> failure_;
};

}  // namespace

std::unique_ptr<Communicator> make_solo_communicator(const CommOptions& options) {
  return std::make_unique<SoloCommunicator>(options);
}

}  // namespace cnnergy::dist
