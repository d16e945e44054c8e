// Helpers of the benchmarks that run devplugd against the kubelet simulator.
#pragma once

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "kubelet_sim.h"

namespace devplug::bench {

// A fixture /dev/kvm under <dir>/host (as root, which mknod needs): that
// host_root; else "/", the host's own.
inline std::string KvmHostRoot(const std::string& dir) {
  std::filesystem::create_directories(dir + "/host/dev");
  if (mknod((dir + "/host/dev/kvm").c_str(), S_IFCHR | 0600, makedev(10, 232)) == 0)
    return dir + "/host";
  return "/";
}

// The [agent] table these benchmarks start from: the built modules, a
// fixture host_root, warnings only, no resync. Callers append their own
// [agent] keys, then the [[resource]] tables.
inline std::string AgentTable(const std::string& plugin_dir, const std::string& host_root) {
  return "[agent]\nplugin_dir = \"" + plugin_dir + "\"\nmodule_dir = \"" +
         DEVPLUG_BENCH_MODULE_DIR + "\"\nhost_root = \"" + host_root +
         "\"\nlog_level = \"warn\"\nresync_interval = \"0s\"\n";
}

// A simulated kubelet that owns plugin_dir (a temporary folder) and writes
// no checkpoint noise.
inline sim::KubeletSim::Options SimOptions(const std::string& plugin_dir) {
  sim::KubeletSim::Options o;
  o.dir = plugin_dir;
  o.owns_dir = true;
  o.checkpoint_noise = false;
  return o;
}

// A DevicePlugin client of its own (no shared subchannel) on a socket,
// connected (or given up after 10 s).
inline std::unique_ptr<v1beta1::DevicePlugin::Stub> DevicePluginStub(const std::string& socket) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto ch = grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), args);
  ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return v1beta1::DevicePlugin::NewStub(ch);
}

// A field of /proc/<pid>/status in KiB ("VmRSS", "RssAnon"; "Threads" as
// it is); -1 when absent.
inline long StatusKb(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  return -1;
}

}  // namespace devplug::bench
