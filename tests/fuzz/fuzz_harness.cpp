// The mutator and the forking runner of the parser fuzz tests (see fuzz_harness.hpp).
#include "fuzz/fuzz_harness.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <thread>

#include "core/errors.hpp"

namespace cnnergy::fuzz {

namespace {

std::uint64_t fnv(const Bytes& b) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (auto c : b) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

std::uint64_t current_address_space() {
  std::ifstream in("/proc/self/statm");
  std::uint64_t pages = 0;
  in >> pages;
  return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// The child: limits, then the parser; the exit code carries the outcome, the message goes to a pipe.
[[noreturn]] void child_main(const Bytes& input, const ParseFn& parse, const FuzzOptions& o, int msg_fd) {
  if (!kAsan) {  // ASan reserves terabytes of address space; its own allocation limit applies instead
    const std::uint64_t limit = current_address_space() + o.memory_budget_bytes + 64 * input.size();
    rlimit r{limit, limit};
    ::setrlimit(RLIMIT_AS, &r);
  }
  ::alarm(static_cast<unsigned>(o.timeout_s + 0.999));
  int code = 0;
  std::string msg;
  try {
    parse(input);
    code = 0;
  } catch (const Error& e) {
    code = 40;
    msg = e.what();
  } catch (const std::bad_alloc&) {
    code = 42;
    msg = "std::bad_alloc (an allocation beyond the memory limit)";
  } catch (const std::exception& e) {
    code = 41;
    msg = std::string("untyped exception: ") + e.what();
  } catch (...) {
    code = 41;
    msg = "unknown exception";
  }
  if (msg.size() > 400) msg.resize(400);
  [[maybe_unused]] const auto n = ::write(msg_fd, msg.data(), msg.size());
  std::fflush(nullptr);
  ::_exit(code);
}

}  // namespace

std::size_t input_count(std::size_t ci) {
  if (const char* n = std::getenv("CNNERGY_FUZZ_INPUTS"); n && *n) return static_cast<std::size_t>(std::strtoull(n, nullptr, 10));
  if (const char* l = std::getenv("CNNERGY_FUZZ_LONG"); l && std::string(l) == "1") return ci * 20;
  return ci;
}

std::uint64_t fuzz_seed() {
  if (const char* s = std::getenv("CNNERGY_FUZZ_SEED"); s && *s) return std::strtoull(s, nullptr, 10);
  return 20261126;
}

void Mutator::mutate_once(Bytes& b, const std::vector<Bytes>& seeds) {
  auto pick = [&](std::size_t n) { return n == 0 ? std::size_t{0} : static_cast<std::size_t>(rng_() % n); };
  static const std::uint64_t kInteresting[] = {0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0x7fffffff, 0x80000000,
                                               0xffffffff, 0x7fffffffffffffffull, 0xffffffffffffffffull,
                                               0x100, 0x10000, 0x40000000, 3073};
  switch (rng_() % 9) {
    case 0:  // bit flips
      for (int i = 0, n = 1 + static_cast<int>(rng_() % 8); i < n && !b.empty(); ++i) b[pick(b.size())] ^= static_cast<std::uint8_t>(1u << (rng_() % 8));
      break;
    case 1:  // an interesting byte
      if (!b.empty()) b[pick(b.size())] = static_cast<std::uint8_t>(kInteresting[pick(5)]);
      break;
    case 2:  // truncation
      b.resize(pick(b.size() + 1));
      break;
    case 3: {  // extension: random bytes or a repeat of the tail
      const std::size_t n = 1 + pick(rng_() % 4 == 0 ? 4096 : 64);
      for (std::size_t i = 0; i < n; ++i) b.push_back(b.empty() || rng_() % 2 ? static_cast<std::uint8_t>(rng_()) : b[pick(b.size())]);
      break;
    }
    case 4:
    case 5: {  // length-field corruption: an interesting 2/4/8-byte value, either byte order, often aligned
      const std::size_t width = std::size_t{2} << pick(3);
      if (b.size() < width) break;
      std::size_t at = pick(b.size() - width + 1);
      if (rng_() % 2) at &= ~(width - 1);
      std::uint64_t v = kInteresting[pick(std::size(kInteresting))];
      if (rng_() % 3 == 0) v = rng_() % 1000000;
      const bool big = rng_() % 2;
      for (std::size_t i = 0; i < width; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * (big ? width - 1 - i : i)));
      break;
    }
    case 6: {  // splice: a piece of another seed at a random place
      const Bytes& donor = seeds[pick(seeds.size())];
      if (donor.empty()) break;
      const std::size_t from = pick(donor.size()), len = 1 + pick(donor.size() - from);
      const std::size_t at = pick(b.size() + 1);
      b.resize(at);
      b.insert(b.end(), donor.begin() + static_cast<std::ptrdiff_t>(from), donor.begin() + static_cast<std::ptrdiff_t>(from + len));
      break;
    }
    case 7: {  // insert bytes
      const std::size_t at = pick(b.size() + 1), n = 1 + pick(16);
      Bytes ins(n);
      for (auto& c : ins) c = static_cast<std::uint8_t>(rng_());
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
      break;
    }
    default: {  // delete bytes
      if (b.empty()) break;
      const std::size_t at = pick(b.size()), n = 1 + pick(std::min<std::size_t>(16, b.size() - at));
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
      break;
    }
  }
}

Bytes Mutator::mutate(const std::vector<Bytes>& seeds) {
  Bytes b = seeds[static_cast<std::size_t>(rng_() % seeds.size())];
  for (int i = 0, n = 1 + static_cast<int>(rng_() % 4); i < n; ++i) mutate_once(b, seeds);
  return b;
}

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kAccepted: return "accepted";
    case Outcome::kTypedError: return "typed error";
    case Outcome::kUntypedException: return "untyped exception";
    case Outcome::kOutOfMemory: return "allocation beyond the limit";
    case Outcome::kCrash: return "crash";
    case Outcome::kHang: return "hang";
  }
  return "?";
}

namespace {

Outcome run_one(const Bytes& input, const ParseFn& parse, const FuzzOptions& o, std::string* message) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    child_main(input, parse, o, fds[1]);
  }
  ::close(fds[1]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  char buf[512];
  message->clear();
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) message->append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  if (WIFSIGNALED(status)) {
    if (WTERMSIG(status) == SIGALRM) return Outcome::kHang;
    *message = std::string("signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
    return Outcome::kCrash;
  }
  switch (WEXITSTATUS(status)) {
    case 0: return Outcome::kAccepted;
    case 40: return Outcome::kTypedError;
    case 42: return Outcome::kOutOfMemory;
    case 41: return Outcome::kUntypedException;
    default:  // e.g. a sanitizer's report (exit 1)
      *message = "exit status " + std::to_string(WEXITSTATUS(status)) + " " + *message;
      return Outcome::kCrash;
  }
}

void record(FuzzReport& r, Outcome out, const std::string& msg, const Bytes& input, const FuzzOptions& o,
            const std::string& saved_as) {
  ++r.inputs;
  if (out == Outcome::kAccepted) ++r.accepted;
  else if (out == Outcome::kTypedError) ++r.typed_errors;
  else {
    std::string where = saved_as;
    if (where.empty() && !o.failures_dir.empty()) {
      std::filesystem::create_directories(o.failures_dir);
      char name[64];
      std::snprintf(name, sizeof name, "%s-%016llx.bin", r.parser.c_str(), static_cast<unsigned long long>(fnv(input)));
      where = (o.failures_dir / name).string();
      write_all(where, input);
    }
    r.failures.push_back(std::string(outcome_name(out)) + ": " + where + ": " + msg);
  }
}

}  // namespace

FuzzReport run_fuzz(const std::string& parser, const std::vector<Bytes>& seeds, const ParseFn& parse,
                    const FuzzOptions& options, std::uint64_t seed) {
  FuzzReport r;
  r.parser = parser;
  Mutator m(seed ^ fnv(Bytes(parser.begin(), parser.end())));
  std::string msg;
  for (const Bytes& s : seeds) {  // the valid seeds themselves must be accepted
    const Outcome out = run_one(s, parse, options, &msg);
    if (out != Outcome::kAccepted) r.failures.push_back("seed not accepted (" + std::string(outcome_name(out)) + "): " + msg);
  }
  for (std::size_t i = 0; i < options.inputs; ++i) {
    const Bytes input = m.mutate(seeds);
    const Outcome out = run_one(input, parse, options, &msg);
    record(r, out, msg, input, options, "");
  }
  return r;
}

FuzzReport replay_regressions(const std::string& parser, const ParseFn& parse, const FuzzOptions& options) {
  FuzzReport r;
  r.parser = parser + " (regressions)";
  const std::filesystem::path dir = std::filesystem::path(CNNERGY_TEST_SOURCE_DIR) / "tests/fuzz/regressions";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind(parser + "-", 0) != 0) continue;
    std::string msg;
    const Bytes input = read_all(e.path());
    record(r, run_one(input, parse, options, &msg), msg, input, options, e.path().string());
  }
  return r;
}

Bytes read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_all(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace cnnergy::fuzz
