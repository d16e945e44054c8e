// devplugd: one node agent serving many Kubernetes device plugin resources.
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "agent.h"
#include "config/config.h"
#include "modules/conflicts.h"
#include "modules/loaded_module.h"
#include "modules/module_instance.h"
#include "node_labels.h"
#include "ops/log.h"
#include "status_cli.h"
#include "util/handover.h"
#include "util/sanitizers.h"

namespace {

// sysexits.h: configuration error.
constexpr int kExitConfig = 78;
constexpr int kExitUsage = 64;

// Used with --builtin-config: KubeVirt's kvm (Healthy where the host has
// KVM) and tun (nearly every Linux host has /dev/net/tun), so that the demo
// shows a whole happy path anywhere.
constexpr char kBuiltinConfig[] = R"(# devplugd built-in configuration
[agent]
log_level = "info"

[[resource]]
name = "devices.kubevirt.io/kvm"
module = "kvm"
shares = 110

[[resource]]
name = "devices.kubevirt.io/tun"
module = "generic"
paths = ["/dev/net/tun"]
shares = 110
preopen = true
)";

struct Flags {
  std::string config_path = "/etc/devplug/devplug.toml";
  bool check_config = false;
  bool builtin_config = false;
  bool print_builtin = false;
  std::optional<std::string> plugin_dir, module_dir, host_root, control_socket;
  std::string log_level;
};

// --check-config: loads each module, checks its keys and creates each
// instance once (modules check their values, and what they find, in
// create()); prints the resolved resources. The instances live together
// until the end, as in the agent, so that modules see each other.
int CheckConfig(const devplug::config::AgentConfig& cfg) {
  int failures = 0;
  std::vector<std::pair<std::string, devplug::DeviceListPtr>> lists;
  std::vector<std::unique_ptr<devplug::modules::ModuleInstance>> live;
  std::printf("files:");
  for (const auto& f : cfg.files) std::printf(" %s", f.c_str());
  std::printf(
      "\nplugin_dir: %s\nmodule_dir: %s\nhost_root: %s\nlog_level: %s\n"
      "resync_interval: %lldms\nudev_source: %s\nresources: %zu\n",
      cfg.plugin_dir.c_str(), cfg.module_dir.c_str(), cfg.host_root.c_str(),
      std::string(devplug::config::LogLevelName(cfg.log_level)).c_str(),
      static_cast<long long>(cfg.resync_interval.count()),
      std::string(devplug::config::UdevSourceName(cfg.udev_source)).c_str(), cfg.resources.size());
  for (size_t i = 0; i < cfg.resources.size(); ++i) {
    const auto& r = cfg.resources[i];
    const std::string path = devplug::modules::ResolveModulePath(r.module, cfg.module_dir);
    std::printf("- %s\n    defined: %s:%d\n    module: %s\n    socket: %s/%s\n    required: %s\n",
                r.name.c_str(), r.where.file.c_str(), r.where.line, path.c_str(),
                cfg.plugin_dir.c_str(), r.socket.c_str(), r.required ? "true" : "false");
    auto m = devplug::modules::LoadedModule::Load(path);
    devplug::Status st = m.ok() ? (*m)->CheckKeys(r, i) : m.status();
    if (st.ok()) {
      // create() validates the values; the first scan shows what it finds.
      devplug::modules::ModuleInstance::Options o;
      o.host_root = cfg.host_root;
      o.index = i;
      auto inst = devplug::modules::ModuleInstance::Create(*m, r, std::move(o));
      if (!inst.ok()) {
        st = inst.status();
      } else {
        const auto devices = (*inst)->devices();
        size_t healthy = 0;
        for (const auto& d : *devices) healthy += d.healthy ? 1 : 0;
        std::printf("    devices: %zu (%zu healthy)\n", devices->size(), healthy);
        lists.emplace_back(r.name, devices);
        live.push_back(std::move(*inst));
      }
    }
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      ++failures;
    } else {
      std::printf("    module ok: %s %s\n", std::string((*m)->name()).c_str(),
                  std::string((*m)->version()).c_str());
    }
  }
  for (const std::string& w : devplug::FindRecipeConflicts(lists))
    std::printf("warning: %s\n", w.c_str());
  if (failures > 0) {
    std::fprintf(stderr, "configuration has %d problem(s)\n", failures);
    return kExitConfig;
  }
  std::printf("configuration ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Linked as devplugctl (the container image has no devplugctl of its
  // own): its status and metrics commands.
  if (argc > 0 && std::string_view(argv[0]).ends_with("devplugctl"))
    return devplug::ctl::StatusOnlyMain(argc, argv, DEVPLUG_VERSION);
  CLI::App app{"devplugd: serves node hardware to the kubelet as device plugin resources"};
  Flags f;
  app.add_option("-c,--config", f.config_path,
                 "Main configuration file; drop-ins are read from conf.d/ beside it")
      ->capture_default_str();
  app.add_flag("--check-config", f.check_config,
               "Validate the configuration and modules, print the resolved resources, exit");
  app.add_flag("--builtin-config", f.builtin_config,
               "Use the built-in configuration (kvm and tun resources) instead of a file");
  app.add_flag("--print-builtin-config", f.print_builtin, "Print the built-in configuration");
  app.add_option("--plugin-dir", f.plugin_dir, "Override agent.plugin_dir (checked like it)");
  app.add_option("--module-dir", f.module_dir, "Override agent.module_dir (checked like it)");
  app.add_option("--host-root", f.host_root, "Override agent.host_root (checked like it)");
  app.add_option("--control-socket", f.control_socket,
                 "Override agent.control_socket (\"\" turns it off)");
  app.add_option("--log-level", f.log_level, "Override agent.log_level")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.set_version_flag("-V,--version", std::string("devplugd ") + DEVPLUG_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  // Started by a devplugd that hands over to this one: its socket pair,
  // out of the environment before anything else starts.
  const int predecessor_fd = devplug::handover::TakePredecessorFd();
  if (f.print_builtin) {
    std::fputs(kBuiltinConfig, stdout);
    return 0;
  }

  devplug::SetupLogging("devplugd");

  devplug::config::LoadOptions load_opts;
  load_opts.default_module_dir = DEVPLUG_MODULE_DIR;
  load_opts.plugin_dir = f.plugin_dir;
  load_opts.module_dir = f.module_dir;
  load_opts.host_root = f.host_root;
  load_opts.control_socket = f.control_socket;
  // A resource with api = "node-label" needs the Node read (not for
  // --check-config, which needs no API server).
  const devplug::Loader load = [&f](const devplug::config::LoadOptions& o) {
    return f.builtin_config ? devplug::config::LoadString(kBuiltinConfig, "<built-in>", o)
                            : devplug::config::LoadFile(f.config_path, o);
  };
  auto cfg = f.check_config ? load(load_opts)
                            : devplug::LoadWithNodeLabels(load, load_opts, /*must_read=*/false);
  if (!cfg.ok()) {
    std::fprintf(stderr, "devplugd: configuration error:\n%s\n",
                 std::string(cfg.status().message()).c_str());
    return kExitConfig;
  }
  if (!f.log_level.empty()) devplug::config::ParseLogLevel(f.log_level, &cfg->log_level);
  if (f.check_config) {
    devplug::SetLogLevel(devplug::LogLevel::kWarn);
    return CheckConfig(*cfg);
  }
  devplug::SetLogLevel(cfg->log_level);
  if (!cfg->api_label_note.empty()) spdlog::info("api = \"node-label\": {}", cfg->api_label_note);

  // Signals arrive through a signalfd; block them before any thread starts
  // so no gRPC or module thread receives them.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
  if (sfd < 0) {
    spdlog::error("signalfd: {}", std::strerror(errno));
    return 1;
  }

  spdlog::info("devplugd {} starting: {} resource(s), plugin_dir {}", DEVPLUG_VERSION,
               cfg->resources.size(), cfg->plugin_dir);
  int rc = 0;
  {
    devplug::Agent::Options agent_opts;
    agent_opts.version = DEVPLUG_VERSION;
    // SIGHUP reads the same files, with the same command line, again:
    // --log-level still wins over the file's log_level.
    if (!f.builtin_config) agent_opts.config_path = f.config_path;
    // A handover starts the same command line: after a package upgrade,
    // the installed binary at the same path.
    agent_opts.argv.assign(argv, argv + argc);
    agent_opts.predecessor_fd = predecessor_fd;
    if (!f.builtin_config)
      agent_opts.reload = [path = f.config_path, load_opts, level = f.log_level] {
        auto next = devplug::LoadWithNodeLabels(
            [&path](const devplug::config::LoadOptions& o) {
              return devplug::config::LoadFile(path, o);
            },
            load_opts, /*must_read=*/true);
        if (next.ok() && !next->api_label_note.empty())
          spdlog::info("api = \"node-label\": {}", next->api_label_note);
        if (next.ok() && !level.empty()) devplug::config::ParseLogLevel(level, &next->log_level);
        return next;
      };
    devplug::Agent agent(*cfg, std::move(agent_opts));
    if (devplug::Status st = agent.Start(); !st.ok()) {
      if (st.code() == devplug::StatusCode::kInvalidArgument) {
        std::fprintf(stderr, "devplugd: configuration error:\n%s\n", st.message().c_str());
        rc = kExitConfig;
      } else {
        spdlog::error("{}", st.message());
        rc = 1;
      }
    } else {
      rc = agent.Run(sfd);
#if !defined(DEVPLUG_ASAN) && !defined(DEVPLUG_TSAN)
      // Everything devplugd owes the node is done once Run returns: streams
      // ended, sockets removed, modules destroyed, STOPPING=1 sent. What is
      // left is freeing memory and joining threads (the agent's, the gRPC
      // library's), each a wake-up that a loaded node delays. Sanitizer
      // builds take the normal way, so leaks and errors at exit still show.
      spdlog::shutdown();
      std::fflush(nullptr);
      _exit(rc);
#endif
    }
  }
  close(sfd);
#if !defined(DEVPLUG_ASAN) && !defined(DEVPLUG_TSAN)
  // Everything devplugd owes the node is done: streams ended, sockets
  // removed, modules destroyed, STOPPING=1 sent. What a normal exit would
  // add is the gRPC library's own teardown (joining its threads), most of
  // the time from SIGTERM to exit. Sanitizer builds take the normal way, so
  // leaks and errors at exit still show there.
  spdlog::shutdown();
  std::fflush(nullptr);
  _exit(rc);
#else
  return rc;
#endif
}
