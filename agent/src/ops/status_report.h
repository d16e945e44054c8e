// What devplugd tells about itself, from a view of the agent taken on the
// main loop: the one-line STATUS= systemd shows, and the control socket's
// status JSON (docs/design.md, "Reload, status, metrics"). Pure functions of
// the view, tested over views made by hand.
//
// Thread safety: plain values and functions; a view's pointers (tracker,
// CDI) are read while the view is used, on the thread that owns them.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kubelet/registrar.h"
#include "lifecycle/release_tracker.h"
#include "model/device.h"
#include "model/registration_mode.h"
#include "util/status.h"

namespace devplug::ops {

// A resource's CDI spec (cdi other than "off"), as status shows it.
struct CdiView {
  std::string mode;
  std::string spec, written_to;  // the spec file: as configured, and under host_root
  std::string kind;
  size_t named = 0, allocations = 0;
  std::string problem;
};

// A DRA resource's driver, as status shows it.
struct DraView {
  std::string driver, pool;
  int64_t generation = 0;
  uint64_t slice_syncs = 0;
  std::string slice_error;  // "": the last sync worked
  std::string cdi_dir, cdi_written_to;
  struct Device {
    std::string request, device, id;
    std::vector<std::string> cdi_ids;
  };
  struct Claim {
    std::string uid, ns, name;
    std::vector<Device> devices;
  };
  std::vector<Claim> prepared;
  // Claims whose on_release() outlived the call that began it.
  std::vector<std::string> releasing;
  // Devices left out of the slices: pods hold them through the device
  // plugin API since before a move to DRA ("id (ns/pod)").
  std::vector<std::string> withheld;
  // The resource moved to the device plugin API while these claims were
  // prepared: the driver has no slice and stays for their unprepares.
  bool draining = false;
};

struct ResourceView {
  std::string name;
  std::string module, module_version, module_file;
  std::string socket;
  RegistrationMode registration = RegistrationMode::kKubelet;
  // The instance runs; create() and the first scan are under way; it was
  // left out (why: failure); a retry is due or under way.
  bool running = false, starting = false, failed = false, retrying = false;
  std::string failure;
  // The registrar's word.
  kubelet::Registrar::State state = kubelet::Registrar::State::kDown;
  // DRA: a newer devplugd serves the driver beside this one (it has the
  // kubelet's calls and the slices).
  bool superseded = false;
  bool registered = false;
  std::optional<std::chrono::system_clock::time_point> registered_since;
  std::optional<Status> kubelet_status;  // the plugin watcher's
  std::string last_error;
  // The registration's ListAndWatch stream is open (DRA: the registration
  // was confirmed; the kubelet dials the driver when a pod needs it).
  bool kubelet_connected = false;
  DeviceListPtr devices;  // null: none
  // Release tracking is on: `tracker` says each device's state and holder.
  bool release_tracking = false;
  const lifecycle::ReleaseTracker* tracker = nullptr;
  std::optional<CdiView> cdi;  // none: cdi is "off"
  std::optional<DraView> dra;  // none: the device plugin API serves it
};

struct AgentView {
  std::string version, abi;
  std::chrono::system_clock::time_point since;
  bool started = false;         // every resource's first start attempt has ended
  bool kubelet_socket = false;  // kubelet.sock is there
  std::string release_problem;  // release tracking waits for this
  std::string reload_error;     // the last reload's first error
  std::vector<ResourceView> resources;
};

// "registered 2/3 resources; 1 failed (1 retrying); ...".
std::string StatusLine(const AgentView& view);

// The status JSON: every resource (or only `only`, then with devices),
// devices listed with `devices`; `status` is the last STATUS= line. An
// unknown `only` gives {"error": ...}.
std::string StatusJson(const AgentView& view, const std::string& status, bool devices,
                       const std::string& only);

// The control socket's other answers: {"error": message}, {"metrics": text}.
std::string ErrorJson(const std::string& message);
std::string MetricsJson(const std::string& text);

}  // namespace devplug::ops
