// Mutation fuzzing for the parsers (docs/hardening.md): a seeded mutator (bit flips, interesting bytes,
// truncations, extensions, length-field corruption, splices, inserts and deletes) and a runner that
// feeds each input to a parser in a forked child under a memory limit (RLIMIT_AS) and a time limit, so a
// crash, a hang or an allocation out of proportion to the input is seen and reported, never fatal.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace cnnergy::fuzz {

using Bytes = std::vector<std::uint8_t>;

// Inputs per parser: CNNERGY_FUZZ_INPUTS, else 20x the CI count when CNNERGY_FUZZ_LONG=1, else `ci`.
std::size_t input_count(std::size_t ci);
// The seed: CNNERGY_FUZZ_SEED, else a fixed one (CI is reproducible).
std::uint64_t fuzz_seed();

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}
  // One to four mutations of a seed picked from `seeds` (the others are splice donors).
  Bytes mutate(const std::vector<Bytes>& seeds);
  std::mt19937_64& rng() { return rng_; }

 private:
  void mutate_once(Bytes& b, const std::vector<Bytes>& seeds);
  std::mt19937_64 rng_;
};

// The outcome of one input in the child.
enum class Outcome { kAccepted, kTypedError, kUntypedException, kOutOfMemory, kCrash, kHang };
const char* outcome_name(Outcome o);

struct FuzzReport {
  std::string parser;
  std::size_t inputs = 0, accepted = 0, typed_errors = 0;
  std::vector<std::string> failures;  // "<outcome>: <saved input path>: <message>"
};

struct FuzzOptions {
  std::size_t inputs = 1000;
  double timeout_s = 5;                              // per input
  std::uint64_t memory_budget_bytes = 256ull << 20;  // address space the child may add, beyond 64x the input
  std::filesystem::path failures_dir;                // where a failing input is kept (for tests/fuzz/regressions/)
};

// `parse` gets the input bytes; it returns normally (accepted) or throws. cnnergy::Error is a clean
// typed error; anything else, a signal, a timeout or bad_alloc is a failure.
using ParseFn = std::function<void(const Bytes& input)>;

FuzzReport run_fuzz(const std::string& parser, const std::vector<Bytes>& seeds, const ParseFn& parse,
                    const FuzzOptions& options, std::uint64_t seed);
// Replays every file tests/fuzz/regressions/<parser>-* (each must end in success or a typed error).
FuzzReport replay_regressions(const std::string& parser, const ParseFn& parse, const FuzzOptions& options);

Bytes read_all(const std::filesystem::path& path);
void write_all(const std::filesystem::path& path, const Bytes& bytes);

}  // namespace cnnergy::fuzz
