// `cnnergy restore`: after a crash or kill -9, puts back the GPU settings recorded in the knob
// journal (matching GPUs by UUID) and deletes it. Entries that cannot be restored stay in the
// journal and make the command fail, so nothing is silently forgotten (unless --forget).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "cli/args.hpp"
#include "cli/knobs_flag.hpp"
#include "cli/vocabulary.hpp"
#include "core/json.hpp"
#include "cli/telemetry_commands.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "telemetry/journal.hpp"
#include "telemetry/knob_client.hpp"
#include "telemetry/knob_protocol.hpp"
#include "telemetry/nvml.hpp"

namespace cnnergy::cli {

int run_restore(const std::vector<std::string>& args) {
  ArgParser p(
      "restore",
      "Restore GPU settings (power limit, locked clocks) left changed by a cnnergy run that "
      "crashed or was killed, from the knob journal.");
  p.option("journal",
           "knob journal file [default: $CNNERGY_JOURNAL or ~/.cache/cnnergy/knob-journal.json]");
  p.flag("dry-run", "print what would be restored; change nothing");
  p.flag("forget",
         "delete the journal even where restoring fails or it is corrupt (after reporting)");
  declare_output_flags(p, "the list of restored settings");
  p.epilog(
      "Exit status: 0 when everything was restored (or there was nothing to do); 3 for a corrupt "
      "journal;\n"
      "4 without NVML; 7 when a setting could not be restored (e.g. its GPU is gone); 2 when the "
      "run that\n"
      "wrote the journal is still alive (it restores on exit).\n"
      "Through cnnergyd (--knobs daemon, or auto when not root and there is no local journal): the daemon\n"
      "restores a client's settings when it disconnects; this asks it to retry any it could not.");
  add_knobs_option(p);
  if (!p.parse(args)) return 0;
  OutputSink sink(p);
  Json doc = Json::object();  // the machine-readable summary: one row per setting in CSV
  Json settings = Json::array();
  auto finish = [&](const std::string& status, int rc) {
    doc["status"] = status;
    doc["settings"] = settings;
    sink.finish(doc, "settings");
    return rc;
  };
  const telemetry::KnobsMode mode = knobs_mode(p);
  const bool dry_run = p.get_flag("dry-run") || mode == telemetry::KnobsMode::kDryRun;
  const bool forget = p.get_flag("forget");
  telemetry::Journal journal(
      p.get_optional("journal").value_or(telemetry::Journal::default_path()));
  doc["journal"] = journal.path();
  doc["dry_run"] = dry_run;
  struct stat st {};
  const std::string socket = telemetry::default_daemon_socket();
  if (mode == telemetry::KnobsMode::kDaemon ||
      (mode == telemetry::KnobsMode::kAuto && ::geteuid() != 0 && !journal.exists() &&
       ::stat(socket.c_str(), &st) == 0)) {
    if (dry_run || forget)
      throw InvalidArgument("--dry-run and --forget apply to a local journal, not to cnnergyd");
    telemetry::KnobClient client(socket);
    std::fprintf(stderr, "cnnergy: restore: %s\n", client.describe().c_str());
    Json r = Json::object();
    r["v"] = telemetry::kKnobProtocolVersion;
    r["op"] = "restore";
    const Json reply = client.call(std::move(r));
    for (const Json& line : reply["restored"].items()) {
      std::printf("restored %s\n", line.as_string().c_str());
      Json x = Json::object();
      x["setting"] = line;
      x["result"] = "restored";
      settings.push_back(x);
    }
    std::printf("cnnergyd has no setting of yours left to restore\n");
    doc["journal"] = Json();
    doc["daemon"] = socket;
    return finish("restored through cnnergyd", 0);
  }
  std::fprintf(stderr, "cnnergy: restore: %s, journal %s\n", dry_run ? "dry run" : "direct",
               journal.path().c_str());

  if (!journal.exists()) {
    std::printf("nothing to restore (no journal at %s)\n", journal.path().c_str());
    return finish("no journal", 0);
  }
  telemetry::JournalData data;
  try {
    data = journal.read();
  } catch (const DataError& e) {
    if (!forget) throw;
    log_warn(e.what());
    journal.remove();
    std::printf("deleted the corrupt journal %s (--forget)\n", journal.path().c_str());
    return finish("corrupt journal deleted", 0);
  }
  if (telemetry::Journal::writer_alive(data))
    throw InvalidArgument("the process that wrote " + journal.path() + " (pid " +
                          std::to_string(data.pid) +
                          ") is still running: it restores its settings when it ends");
  if (data.entries.empty()) {
    if (!dry_run) journal.remove();
    std::printf("nothing to restore (empty journal %s)\n", journal.path().c_str());
    return finish("empty journal", 0);
  }

  auto opened = telemetry::Nvml::open();
  if (!opened.nvml && !forget)
    throw NotSupported("cannot restore the settings in " + journal.path() + ": " +
                       opened.unavailable_reason);
  const telemetry::RestoreReport r =
      telemetry::restore_entries(opened.nvml.get(), data.entries, dry_run);
  for (const auto& line : r.restored)
    std::printf("%s%s\n", dry_run ? "" : "restored ", line.c_str());
  for (const auto& line : r.failed)
    std::fprintf(stderr, "cnnergy: could not restore %s\n", line.c_str());
  for (const auto* lines : {&r.restored, &r.failed})
    for (const auto& line : *lines) {
      Json x = Json::object();
      x["setting"] = line;
      x["result"] = lines == &r.failed ? "failed" : dry_run ? "would restore" : "restored";
      settings.push_back(x);
    }
  if (dry_run) return finish("dry run", r.failed.empty() ? 0 : static_cast<int>(ExitCode::kDevice));

  if (r.failed.empty() || forget) {
    journal.remove();
    if (!r.failed.empty())
      std::printf("deleted %s with %zu setting(s) not restored (--forget)\n",
                  journal.path().c_str(), r.failed.size());
    else
      std::printf("all %zu setting(s) restored; deleted %s\n", r.restored.size(),
                  journal.path().c_str());
    return finish(r.failed.empty() ? "restored" : "journal deleted with settings not restored", 0);
  }
  telemetry::JournalData rest =
      telemetry::Journal::for_this_process();  // our pid: dead once we exit
  rest.entries = r.remaining;
  journal.write(rest);
  finish("some settings not restored", 0);  // the error below carries the exit code
  throw DeviceError(std::to_string(r.failed.size()) +
                    " setting(s) could not be restored and stay in " + journal.path() +
                    " (fix the cause and run `cnnergy restore` again, or use --forget)");
}

}  // namespace cnnergy::cli
