// Checkpoint files (format in checkpoint.hpp): write to a temporary file and rename, so an
// interrupted save never leaves a half-written checkpoint under the final name; on load, check the
// magic, the checksum, the version, the model name and every tensor's name and shape before
// touching the network.
#include "net/checkpoint.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

#include "core/bounded_file.hpp"
#include "core/errors.hpp"
#include "core/hash.hpp"
#include "net/executor.hpp"
#include "net/solver.hpp"

namespace cnnergy {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoints are written little-endian");

constexpr char kMagic[8] = {'C', 'N', 'N', 'R', 'G', 'C', 'K', 'P'};
constexpr std::uint32_t kVersion = 1;

class Writer {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void put_floats(std::span<const float> v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(v.data());
    bytes_.insert(bytes_.end(), p, p + v.size_bytes());
  }
  std::vector<std::uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<std::uint8_t> bytes_;
};

class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size, std::string path) : data_(data), size_(size), path_(std::move(path)) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string get_string() {
    const auto n = get<std::uint32_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  const std::uint8_t* take(std::size_t n) {
    need(n);
    const std::uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  bool at_end() const { return pos_ == size_; }

 private:
  void need(std::size_t n) const {
    if (n > size_ - pos_) throw DataError("checkpoint " + path_ + " is truncated or malformed");
  }
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::string path_;
};

// A device tensor as fp32 NCHW on the host.
Tensor fetch(Backend& backend, const Tensor& t) {
  Tensor host = Tensor::host(t.shape(), t.dtype(), t.layout());
  backend.download(t, host);
  return to_f32_nchw(host);
}

struct Record {
  Shape shape;
  const float* data = nullptr;  // unaligned-safe: copied with memcpy
};

struct Named {
  std::string name;
  Tensor tensor;  // device tensor to save from / load into
};

std::vector<Named> tensors_of(Executor& executor, const std::vector<Tensor>* momentum) {
  std::vector<Named> out;
  for (Parameter* p : executor.parameters()) out.push_back({p->name, p->master});
  for (StateBuffer* b : executor.buffers()) out.push_back({b->name, b->tensor});
  if (momentum) {
    const auto params = executor.parameters();
    for (std::size_t i = 0; i < params.size(); ++i) out.push_back({params[i]->name + ".momentum", (*momentum)[i]});
  }
  return out;
}

struct Parsed {
  std::vector<std::uint8_t> bytes;
  std::string model;
  SolverState state;
  std::map<std::string, Record> records;
};

// A name read from a file, safe to print: printable ASCII as is, other bytes as \xNN, at most 80 bytes.
std::string printable(const std::string& name) {
  std::string out;
  for (std::size_t i = 0; i < name.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return name.size() > 80 ? out + "..." : out;
}

Parsed parse(const std::string& path) {
  Parsed out;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw DataError("checkpoint " + path + " is a directory; give the checkpoint file (the --save FILE of a run)");
  out.bytes = read_bounded_bytes(path, kCheckpointLimit);  // a regular file within the limit, or DataError
  const auto& b = out.bytes;
  if (b.size() < sizeof(kMagic) || std::memcmp(b.data(), kMagic, sizeof(kMagic)) != 0)
    throw DataError(path + " is not a cnnergy checkpoint (bad magic)");
  if (b.size() < sizeof(kMagic) + sizeof(std::uint64_t))
    throw DataError("checkpoint " + path + " is truncated");
  const std::size_t body = b.size() - sizeof(std::uint64_t);
  std::uint64_t stored = 0;
  std::memcpy(&stored, b.data() + body, sizeof(stored));
  if (fnv1a64(b.data(), body) != stored)
    throw DataError("checkpoint " + path + " is corrupt or truncated (checksum mismatch)");
  Reader r(b.data(), body, path);
  r.take(sizeof(kMagic));
  const auto version = r.get<std::uint32_t>();
  if (version != kVersion)
    throw DataError("checkpoint " + path + " has version " + std::to_string(version) + ", this cnnergy reads " +
                    std::to_string(kVersion));
  out.model = r.get_string();
  out.state.iteration = r.get<std::int64_t>();
  out.state.learning_rate = r.get<double>();
  out.state.loss_scale = r.get<float>();
  out.state.good_steps = r.get<std::int64_t>();
  out.state.skipped_steps = r.get<std::int64_t>();
  // The checksum only says the file is as written: values no training run can reach are refused too.
  constexpr std::int64_t kMaxCount = std::int64_t{1} << 48;
  auto count_ok = [](std::int64_t v) { return v >= 0 && v <= kMaxCount; };
  if (!count_ok(out.state.iteration) || !count_ok(out.state.good_steps) || !count_ok(out.state.skipped_steps))
    throw DataError("checkpoint " + path + " holds an impossible iteration count (" + std::to_string(out.state.iteration) +
                    "; good steps " + std::to_string(out.state.good_steps) + ", skipped " +
                    std::to_string(out.state.skipped_steps) + ")");
  if (!std::isfinite(out.state.learning_rate) || out.state.learning_rate < 0 || !std::isfinite(out.state.loss_scale) ||
      !(out.state.loss_scale > 0))
    throw DataError("checkpoint " + path + " holds an impossible learning rate or loss scale");
  const auto count = r.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < count; ++i) {
    std::string name = r.get_string();
    const auto rank = r.get<std::uint32_t>();
    if (rank > 8)
      throw DataError("checkpoint " + path + ": tensor '" + printable(name) + "' has rank " + std::to_string(rank));
    std::vector<std::int64_t> dims(rank);
    std::uint64_t elements = 1;
    for (auto& d : dims) {
      d = r.get<std::int64_t>();
      if (d < 0 || __builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements) || elements > body)
        throw DataError("checkpoint " + path + ": tensor '" + printable(name) + "' has impossible dimensions");
    }
    Record rec{Shape(dims), nullptr};
    const auto n = r.get<std::uint64_t>();
    if (n != elements)
      throw DataError("checkpoint " + path + ": tensor '" + printable(name) + "' holds " + std::to_string(n) +
                      " values for shape " + rec.shape.str());
    if (n > body) throw DataError("checkpoint " + path + " is truncated or malformed");
    rec.data = reinterpret_cast<const float*>(r.take(static_cast<std::size_t>(n) * sizeof(float)));
    for (std::uint64_t k = 0; k < n; ++k) {
      float v;
      std::memcpy(&v, rec.data + k, sizeof v);
      if (!std::isfinite(v))
        throw DataError("checkpoint " + path + ": tensor '" + printable(name) + "' holds a non-finite value (NaN or "
                        "infinity) at element " + std::to_string(k) + "; the run that saved it had diverged");
    }
    if (!out.records.emplace(name, rec).second)
      throw DataError("checkpoint " + path + " holds tensor '" + printable(name) + "' twice");
  }
  if (!r.at_end()) throw DataError("checkpoint " + path + " has trailing bytes");
  return out;
}

// Checks that the file matches the network exactly, then uploads every tensor.
void restore(const std::string& path, const Parsed& parsed, Executor& executor, const std::vector<Named>& wanted,
             bool allow_extra) {
  const std::string& model = executor.graph().model_name();
  if (parsed.model != model)
    throw DataError("checkpoint " + path + " is for model '" + printable(parsed.model) + "', not '" + model + "'");
  for (const auto& w : wanted) {
    auto it = parsed.records.find(w.name);
    if (it == parsed.records.end())
      throw DataError("checkpoint " + path + " lacks tensor '" + w.name + "' of model '" + model + "'");
    if (!(it->second.shape == w.tensor.shape()))
      throw DataError("checkpoint " + path + ": tensor '" + w.name + "' is " + it->second.shape.str() +
                      ", the model needs " + w.tensor.shape().str());
  }
  if (!allow_extra && parsed.records.size() != wanted.size())
    throw DataError("checkpoint " + path + " holds tensors the model '" + model + "' does not have");
  Backend& backend = executor.backend();
  for (const auto& w : wanted) {
    const Record& rec = parsed.records.at(w.name);
    Tensor host = Tensor::host(rec.shape);
    std::memcpy(host.raw(), rec.data, host.size_bytes());
    backend.upload(from_f32_nchw(host, DType::kF32, w.tensor.layout()), w.tensor);
  }
  for (std::size_t i = 0; i < executor.num_layers(); ++i) executor.layer(i).refresh_working_copies();
}

}  // namespace

void save_checkpoint(const std::string& path, Executor& executor, SgdSolver& solver) {
  Backend& backend = executor.backend();
  const SolverState state = solver.state();
  const auto tensors = tensors_of(executor, &solver.momentum());
  Writer w;
  for (char c : kMagic) w.put(c);
  w.put(kVersion);
  w.put_string(executor.graph().model_name());
  w.put(static_cast<std::int64_t>(state.iteration));
  w.put(static_cast<double>(solver.learning_rate()));
  w.put(static_cast<float>(state.loss_scale));
  w.put(static_cast<std::int64_t>(state.good_steps));
  w.put(static_cast<std::int64_t>(state.skipped_steps));
  w.put(static_cast<std::uint32_t>(tensors.size()));
  for (const auto& t : tensors) {
    const Tensor host = fetch(backend, t.tensor);
    w.put_string(t.name);
    w.put(static_cast<std::uint32_t>(host.shape().rank()));
    for (auto d : host.shape().dims()) w.put(static_cast<std::int64_t>(d));
    w.put(static_cast<std::uint64_t>(host.numel()));
    w.put_floats(host.f32());
  }
  w.put(fnv1a64(w.bytes().data(), w.bytes().size()));

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw DataError("cannot write checkpoint " + tmp);
    out.write(reinterpret_cast<const char*>(w.bytes().data()), static_cast<std::streamsize>(w.bytes().size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw DataError("writing checkpoint " + tmp + " failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw DataError("cannot move checkpoint into place at " + path + ": " + ec.message());
  }
}

void load_checkpoint(const std::string& path, Executor& executor, SgdSolver& solver) {
  const Parsed parsed = parse(path);
  restore(path, parsed, executor, tensors_of(executor, &solver.momentum()), /*allow_extra=*/false);
  solver.set_state(parsed.state);
}

void load_parameters(const std::string& path, Executor& executor) {
  const Parsed parsed = parse(path);
  restore(path, parsed, executor, tensors_of(executor, nullptr), /*allow_extra=*/true);
}

}  // namespace cnnergy
