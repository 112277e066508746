// `sweep --slurm`: which shards still miss trials (each shard's own database, planned as a resumed
// run would), the two batch scripts, and their submission through sbatch (array first, then the merge
// job depending on it; a refused merge job cancels the array, so nothing is left half-submitted).
#include "cli/sweep_slurm.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "tune/store.hpp"

extern char** environ;

namespace cnnergy::cli {

namespace fs = std::filesystem;

namespace {

// The flags that describe where and how the sweep is submitted rather than what it measures: the
// task's command line is rebuilt from every other flag given.
const std::set<std::string> kNotForTasks = {"slurm", "slurm-opt", "shards", "slurm-dir", "dry-run", "db", "report",
                                            "resume", "new", "shard", "out", "format", "json", "csv"};
// Options of the array that make no sense for the merge job, and options cnnergy sets itself.
const std::vector<std::string> kGpuOptions = {"--gpus", "--gres", "--gpu-", "--gpus-per-", "--mem-per-gpu",
                                              "--cpus-per-gpu", "-G"};
const std::vector<std::string> kOwnOptions = {"--array", "--dependency", "--output", "--error", "--parsable",
                                              "--wrap", "-a", "-d", "-o", "-e"};

std::string quote(const std::string& s) {  // for bash: '...' with ' as '\''
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool starts_with_any(const std::string& s, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes)
    if (s == p || s.rfind(p + "=", 0) == 0 || (p.back() == '-' && s.rfind(p, 0) == 0)) return true;
  return false;
}

std::vector<std::string> parse_slurm_opts(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  std::string tok;
  while (is >> tok) {
    if (tok.rfind("--", 0) != 0)
      throw InvalidArgument("--slurm-opt: '" + tok + "' is not a long sbatch option; write each as --name=value "
                            "(e.g. --slurm-opt \"--partition=gpu --time=01:00:00\")");
    if (starts_with_any(tok, kOwnOptions))
      throw InvalidArgument("--slurm-opt: " + tok + " is set by cnnergy itself (the array, its dependency and the logs)");
    out.push_back(tok);
  }
  return out;
}

// An executable's full path when it is on PATH, else "".
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream is(path ? path : "");
  std::string dir;
  while (std::getline(is, dir, ':')) {
    if (dir.empty()) dir = ".";
    const std::string full = dir + "/" + name;
    if (::access(full.c_str(), X_OK) == 0 && !fs::is_directory(full)) return full;
  }
  return "";
}

struct Captured {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs argv to completion and returns what it printed. For sbatch/scancel: short-lived and quiet.
Captured run_capture(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw DeviceError(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  Captured c;
  if (rc != 0) {
    ::close(pipe_fds[0]);
    throw Error(ExitCode::kChildFailed, "cannot run " + argv[0] + ": " + std::strerror(rc));
  }
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    c.output.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  c.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return c;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// "1-4" or "2,3": the array indices of the shards to run.
std::string array_spec(const std::vector<std::size_t>& shards, std::size_t count) {
  if (shards.size() == count) return "1-" + std::to_string(count);
  std::string out;
  for (std::size_t s : shards) out += (out.empty() ? "" : ",") + std::to_string(s);
  return out;
}

struct SlurmPlan {
  std::size_t shards = 1;
  fs::path dir, db, report;
  std::string exe;                  // this cnnergy, by full path
  std::vector<std::string> task_args;  // sweep's flags without the submission ones
  std::vector<std::string> command;    // "--" and the external command, when the workload is one
  std::vector<std::string> opts;       // --slurm-opt, for the array
  std::vector<std::size_t> to_run;     // shards (1-based) that still miss trials
  std::size_t trials = 0, missing_trials = 0;
  bool meter_slurm_gpu = false;        // add --gpu from the GPUs Slurm gave the task
  std::string resubmit;                // the command that submits what is still missing
  std::string sweep_key;
};

fs::path shard_db(const SlurmPlan& s, const std::string& index) {
  return s.dir / ("shard-" + index + "-of-" + std::to_string(s.shards) + ".db");
}

std::string array_script(const SlurmPlan& s) {
  std::ostringstream o;
  o << "#!/bin/bash\n"
    << "# cnnergy sweep " << s.sweep_key << ": one shard of " << s.shards << " per array task, each into its own\n"
    << "# database (written by `cnnergy sweep --slurm`; re-submitting runs only the shards that miss trials).\n"
    << "#SBATCH --job-name=cnnergy-sweep\n"
    << "#SBATCH --array=" << array_spec(s.to_run, s.shards) << "\n"
    << "#SBATCH --output=" << (s.dir / "task-%a-%A.out").string() << "\n";
  for (const auto& opt : s.opts) o << "#SBATCH " << opt << "\n";
  o << "set -u\n"
    << "shard=\"${SLURM_ARRAY_TASK_ID:?this script runs as a Slurm array task (sbatch)}\"\n"
    << "gpu=()\n";
  if (s.meter_slurm_gpu)  // NVML numbers every GPU of the node; Slurm names the ones this task got
    o << "gpus=\"${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}}\"\n"
      << "if [ -n \"$gpus\" ]; then gpu=(--gpu \"${gpus%%,*}\"); fi\n";
  o << "exec " << quote(s.exe) << " sweep";
  for (const auto& a : s.task_args) o << ' ' << quote(a);
  o << " --resume --shard \"$shard/" << s.shards << "\" --db " << quote(s.dir.string()) << "\"/shard-$shard-of-"
    << s.shards << ".db\" \"${gpu[@]}\"";
  for (const auto& a : s.command) o << ' ' << quote(a);
  o << "\n";
  return o.str();
}

std::string merge_script(const SlurmPlan& s) {
  std::ostringstream o;
  o << "#!/bin/bash\n"
    << "# cnnergy sweep " << s.sweep_key << ": after the array, merge its " << s.shards << " shard databases,\n"
    << "# write the report and list the trials without a result (written by `cnnergy sweep --slurm`).\n"
    << "#SBATCH --job-name=cnnergy-merge\n"
    << "#SBATCH --output=" << (s.dir / "merge-%j.out").string() << "\n";
  for (const auto& opt : s.opts)
    if (!starts_with_any(opt, kGpuOptions)) o << "#SBATCH " << opt << "\n";
  o << "set -u\n"
    << "shards=()\nabsent=()\n"
    << "for i in $(seq 1 " << s.shards << "); do\n"
    << "  f=" << quote(s.dir.string()) << "\"/shard-$i-of-" << s.shards << ".db\"\n"
    << "  if [ -s \"$f\" ]; then shards+=(\"$f\"); else absent+=(\"$i\"); fi\n"
    << "done\n"
    << "if [ ${#absent[@]} -gt 0 ]; then echo \"cnnergy: shard(s) ${absent[*]} of " << s.shards
    << " wrote no database (the task did not start, or died before its first trial)\"; fi\n"
    << "if [ ${#shards[@]} -eq 0 ]; then echo 'cnnergy: no shard database to merge' >&2; exit 3; fi\n"
    << quote(s.exe) << " merge --same-sweep " << quote(s.db.string()) << " \"${shards[@]}\" || exit $?\n"
    << quote(s.exe) << " report " << quote(s.db.string()) << " -o " << quote(s.report.string()) << " || exit $?\n"
    << "echo \"report: " << s.report.string() << "\"\n"
    << "# What a resumed run would still do on the merged database: 0 to run means complete.\n"
    << "plan=$(" << quote(s.exe) << " sweep";
  for (const auto& a : s.task_args) o << ' ' << quote(a);
  o << " --resume --dry-run --db " << quote(s.db.string());
  for (const auto& a : s.command) o << ' ' << quote(a);
  o << " 2>&1) || { echo \"$plan\"; exit 1; }\n"
    << "summary=$(echo \"$plan\" | grep 'trials in the sweep')\n"
    << "echo \"cnnergy: $summary\"\n"
    << "case \"$summary\" in\n"
    << "  *'; 0 to run'*) echo 'cnnergy: sweep complete' ;;\n"
    << "  *) echo 'cnnergy: sweep incomplete; submit what is missing with:'\n"
    << "     echo " << quote("  " + s.resubmit) << "\n"
    << "     exit 1 ;;\n"
    << "esac\n";
  return o.str();
}

// The shards whose database lacks a trial a resumed run would run (failed ones included).
void plan_shards(SlurmPlan& s, const tune::SweepDefinition& def, const std::vector<tune::TrialSpec>& trials) {
  for (std::size_t i = 1; i <= s.shards; ++i) {
    tune::PlanOptions po;
    po.resume = true;
    po.shard = tune::parse_shard(std::to_string(i) + "/" + std::to_string(s.shards));
    const fs::path db = shard_db(s, std::to_string(i));
    std::error_code ec;
    std::optional<tune::ResultStore> store;
    std::optional<tune::SweepRecord> sweep;
    if (fs::exists(db, ec) && fs::file_size(db, ec) > 0) {
      store.emplace(db.string(), tune::ResultStore::Mode::kReadOnly);
      sweep = store->find_sweep(def.key());
      if (!sweep && !store->sweeps().empty())
        throw InvalidArgument("shard database " + db.string() + " holds sweep " + store->sweeps().front().sweep_key +
                              ", not this sweep " + def.key() + ": give another --slurm-dir (or --db)");
    }
    const auto plan = tune::plan_sweep(trials, po, [&](const std::string& key) -> std::optional<tune::TrialStatus> {
      if (!sweep) return std::nullopt;
      return store->trial_status(sweep->id, key);
    });
    if (!plan.to_run.empty()) {
      s.to_run.push_back(i);
      s.missing_trials += plan.to_run.size();
    }
  }
}

std::string joined_command(const std::vector<std::string>& args) {
  std::string out = "cnnergy sweep";
  for (const auto& a : args) out += ' ' + (a.find_first_of(" \t'\"$\\;&|<>()*?") == std::string::npos ? a : quote(a));
  return out;
}

std::string submit(const std::vector<std::string>& argv, const std::string& what) {
  const Captured c = run_capture(argv);
  std::string id = trimmed(c.output);
  if (c.exit_code == 0) {
    id = id.substr(id.rfind('\n') == std::string::npos ? 0 : id.rfind('\n') + 1);  // the last line: JOBID[;CLUSTER]
    id = id.substr(0, id.find(';'));
    if (!id.empty() && id.find_first_not_of("0123456789") == std::string::npos) return id;
  }
  throw Error(ExitCode::kChildFailed, "sbatch refused the " + what + " (exit " + std::to_string(c.exit_code) +
                                          "): " + (id.empty() ? "(no message)" : id));
}

void write_script(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw DataError("cannot write " + path.string() + ": " + std::strerror(errno));
  fs::permissions(path, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
}

}  // namespace

void declare_slurm_flags(ArgParser& p) {
  p.group("Cluster (Slurm)");
  p.flag("slurm", "submit the sweep as a Slurm job array (one shard per task, its own database) plus a merge job "
                  "that joins the shards into --db and writes the report; with --dry-run print both scripts");
  p.option("slurm-opt", "sbatch options for the jobs, as --name=value, e.g. \"--partition=gpu --time=01:00:00 "
                        "--gpus-per-task=1\" (GPU options apply to the array only)");
  p.option("shards", "--slurm: array tasks (shards of the sweep) [default: one per trial, at most 16]");
  p.option("slurm-dir", "--slurm: folder for the scripts, the shard databases and the job logs [default: DB.slurm]");
}

std::string slurm_job_id_from_environment() {
  const char* array_job = std::getenv("SLURM_ARRAY_JOB_ID");
  const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
  if (array_job && *array_job && task && *task) return std::string(array_job) + "_" + task;
  const char* job = std::getenv("SLURM_JOB_ID");
  return job ? std::string(job) : std::string();
}

int run_sweep_on_slurm(const ArgParser& p, const std::vector<std::string>& args, const tune::SweepDefinition& def,
                       const std::vector<tune::TrialSpec>& trials, bool runs_on_gpu) {
  for (const char* f : {"shard", "new"})
    if (p.given(f)) throw InvalidArgument(std::string("--slurm sets each task's shard itself; drop --") + f);
  if (p.get("search") != "grid") throw InvalidArgument("--slurm runs grid sweeps (an adaptive search is sequential)");
  if (trials.empty()) throw InvalidArgument("--slurm: the sweep has no trial to run");
  if (p.get_optional("model") && !p.given("device"))  // the sweep's identity names the device
    throw InvalidArgument("--slurm: give --device (cpu, cuda): this host's default may not be the compute nodes'");
  SlurmPlan s;
  s.sweep_key = def.key();
  s.trials = trials.size();
  s.shards = p.given("shards") ? static_cast<std::size_t>(p.get_int("shards", 1, 100000))
                               : std::min<std::size_t>(trials.size(), 16);
  if (s.shards > trials.size())
    throw InvalidArgument("--shards " + std::to_string(s.shards) + " is more than the sweep's " +
                          std::to_string(trials.size()) + " trials: every shard needs one");
  s.opts = parse_slurm_opts(p.get_optional("slurm-opt").value_or(""));
  s.db = fs::absolute(p.get("db"));
  fs::path dir = p.get_optional("slurm-dir").value_or(s.db.string() + ".slurm");
  s.dir = fs::absolute(dir).lexically_normal();
  s.report = fs::absolute(p.get_optional("report").value_or((s.dir / "report.html").string()));
  std::error_code ec;
  s.exe = fs::read_symlink("/proc/self/exe", ec).string();
  if (s.exe.empty()) throw InternalError("cannot find this program's path (/proc/self/exe)");
  for (const auto& name : p.option_names()) {
    if (kNotForTasks.count(name) || !p.given(name)) continue;
    s.task_args.push_back(p.is_flag(name) ? "--" + name : "--" + name + "=" + p.get(name));
  }
  if (!p.passthrough().empty()) {
    s.command.push_back("--");
    s.command.insert(s.command.end(), p.passthrough().begin(), p.passthrough().end());
  }
  s.meter_slurm_gpu = runs_on_gpu && !p.given("gpu");
  std::vector<std::string> resubmit_args;
  for (const auto& a : args)
    if (a != "--dry-run") resubmit_args.push_back(a);
  s.resubmit = joined_command(resubmit_args);
  plan_shards(s, def, trials);

  const bool dry_run = p.get_flag("dry-run");
  if (dry_run) {
    std::cout << "# " << s.to_run.size() << " of " << s.shards << " shard(s) to run (" << s.missing_trials << " of "
              << s.trials << " trials); scripts in " << s.dir.string() << "\n"
              << "# --- " << (s.dir / "array.sh").string() << " (sbatch --parsable)\n"
              << array_script(s) << "# --- " << (s.dir / "merge.sh").string()
              << " (sbatch --parsable --dependency=afterany:ARRAY_JOB_ID)\n"
              << merge_script(s) << "dry run: nothing was submitted\n";
    return 0;
  }
  const std::string sbatch = find_on_path("sbatch");
  if (sbatch.empty())
    throw NotSupported("--slurm: sbatch is not on PATH (is this a Slurm submit host?); nothing was submitted. "
                       "`--slurm --dry-run` prints the scripts without it");
  fs::create_directories(s.dir, ec);
  if (ec) throw DataError("--slurm: cannot create " + s.dir.string() + ": " + ec.message());
  if (s.to_run.empty()) {
    std::cout << "every shard of sweep " << s.sweep_key << " holds all its trials: submitting only the merge job\n";
  }
  write_script(s.dir / "array.sh", array_script(s));
  write_script(s.dir / "merge.sh", merge_script(s));
  std::string array_id;
  if (!s.to_run.empty()) array_id = submit({sbatch, "--parsable", (s.dir / "array.sh").string()}, "array job");
  std::string merge_id;
  try {
    std::vector<std::string> argv = {sbatch, "--parsable"};
    if (!array_id.empty()) argv.push_back("--dependency=afterany:" + array_id);
    argv.push_back((s.dir / "merge.sh").string());
    merge_id = submit(argv, "merge job");
  } catch (const Error& e) {
    if (array_id.empty()) throw;
    const std::string scancel = find_on_path("scancel");
    const Captured c = scancel.empty() ? Captured{127, "scancel is not on PATH"} : run_capture({scancel, array_id});
    throw Error(ExitCode::kChildFailed, std::string(e.what()) +
                                            (c.exit_code == 0 ? "; the array job " + array_id + " was cancelled, so nothing is submitted"
                                                              : "; cancelling the array job " + array_id +
                                                                    " failed too (" + trimmed(c.output) +
                                                                    "): cancel it with scancel " + array_id));
  }
  if (!array_id.empty())
    std::cout << "submitted array job " << array_id << " (shards " << array_spec(s.to_run, s.shards) << " of "
              << s.shards << ", " << s.missing_trials << " of " << s.trials << " trials to run)\n";
  std::cout << "submitted merge job " << merge_id << (array_id.empty() ? "" : " (after the array)") << ": results in "
            << s.db.string() << ", report " << s.report.string() << "\n"
            << "scripts, shard databases and logs: " << s.dir.string() << "\n"
            << "follow with: squeue -j " << (array_id.empty() ? "" : array_id + ",") << merge_id << "\n";
  return 0;
}

}  // namespace cnnergy::cli
