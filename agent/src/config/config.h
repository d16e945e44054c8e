// Agent configuration: the main TOML file plus conf.d drop-ins, parsed into
// typed structs. Nothing else in the agent reads TOML.
//
// Thread safety: plain values; a loaded AgentConfig is immutable and may be
// shared between threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "config/config_tree.h"
#include "model/cdi_mode.h"
#include "model/log_level.h"
#include "model/registration_mode.h"
#include "model/serving_api.h"
#include "model/udev_source.h"
#include "util/status.h"

namespace devplug::config {

using devplug::CdiMode;
using devplug::LogLevel;
using devplug::UdevSource;

// Where a value came from, for error messages ("file:line").
struct SourceLocation {
  std::string file;
  int line = 0;
};

// One module-owned key of a [[resource]] table, as written in TOML. Its type
// is checked against the module's declared keys when the module is loaded.
struct ModuleValue {
  // Arrays: all integers (non-empty) become vector<int64_t>; otherwise the
  // strings are kept and array_of_non_strings says whether anything else
  // was there. An empty array is an empty vector<string> that also matches
  // an integer-array key.
  // A table is std::monostate here (see `tree`).
  using Value = std::variant<std::string, int64_t, bool, double, std::vector<std::string>,
                             std::vector<int64_t>, std::monostate>;
  Value value;
  SourceLocation where;
  bool array_of_non_strings = false;  // an array holding something else
  // The whole value, tables and arrays of any depth included (ABI 1.3).
  std::shared_ptr<const ConfigNode> tree;
};

// One [[resource]] table: one module instance, one extended resource, one
// socket.
struct ResourceConfig {
  // Extended resource name, validated with the kubelet's rules.
  std::string name;
  // Module: a bare name (<module_dir>/<module>.so) or an absolute .so path.
  std::string module;
  // Socket file name inside plugin_dir (plugins_registry_dir with the
  // plugin watcher). Default: derived from name.
  std::string socket;
  // How it registers: the table's `registration`, else [agent]'s. A DRA
  // resource always registers through the plugin watcher.
  RegistrationMode registration = RegistrationMode::kKubelet;
  // Which API serves it (`api`: "device-plugin", the default, or "dra").
  ServingApi api = ServingApi::kDevicePlugin;
  // `api = "node-label"`: the Node's label [agent] api_label chose `api`
  // (LoadOptions::node_labels); its table is checked for both APIs.
  bool api_from_node_label = false;
  // DRA: the driver name (a DNS subdomain of at most 63 characters): the
  // table's `dra_driver`, else the resource's name turned around
  // ("devplug.io/tun" -> "tun.devplug.io"). "" for the device plugin API.
  std::string driver;
  // DRA: the effect of the taint an Unhealthy device carries in its slice
  // (`dra_taint_effect`): "NoSchedule" (new claims avoid it), "NoExecute"
  // (pods holding it are evicted too) or "None" (informational).
  std::string taint_effect = "NoSchedule";
  // true: failing to load or create this resource stops the agent at start.
  bool required = false;
  // Devices by CDI name (the table's `cdi`, else [agent]'s): the spec's
  // folder (`cdi_dir`, else [agent]'s), and whether Allocate leaves out the
  // classic answer of what the spec carries (`cdi_only`).
  CdiMode cdi = CdiMode::kOff;
  std::string cdi_dir;
  bool cdi_only = false;
  // Every other key of the table, for the module.
  std::map<std::string, ModuleValue> module_keys;
  // Where the table starts.
  SourceLocation where;
  // api = "node-label" served through the device plugin API: the same
  // table as DRA serves it (its driver, socket and registration), so that a
  // DRA checkpoint an earlier devplugd left with claims prepared is drained
  // (the label changed while none ran). Null otherwise. Not compared by a
  // reload: it follows from the rest.
  std::shared_ptr<const ResourceConfig> dra_form;
};

struct AgentConfig {
  // ---- [agent] ----
  // kubelet.sock and our sockets live here.
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  // The kubelet's plugin watcher folder (registration = "plugin-watcher").
  std::string plugins_registry_dir = "/var/lib/kubelet/plugins_registry";
  // How resources register unless their table says otherwise.
  RegistrationMode registration = RegistrationMode::kKubelet;
  // Where bare module names are looked up.
  std::string module_dir;
  // Devices by CDI name, unless a resource's table says otherwise; where
  // the specs are written.
  CdiMode cdi = CdiMode::kOff;
  std::string cdi_dir = "/var/run/cdi";
  // Prefix for every host /sys, /dev, /proc lookup; never sent to the kubelet.
  std::string host_root = "/";
  LogLevel log_level = LogLevel::kInfo;
  // Safety rescan besides events; zero disables.
  std::chrono::milliseconds resync_interval{std::chrono::seconds(60)};
  UdevSource udev_source = UdevSource::kAuto;
  // Reload by itself when the configuration files change on disk (a
  // ConfigMap's symlink swap), as SIGHUP does.
  bool watch_config = false;
  // Longest a module may take to answer Allocate, GetPreferredAllocation or
  // PreStartContainer; the kubelet then gets DEADLINE_EXCEEDED instead of a
  // hung pod admission. Well below the kubelet's 30 s PreStartContainer limit.
  std::chrono::milliseconds call_timeout{std::chrono::seconds(10)};
  // Longest a module may take to create an instance and finish its first
  // scan, or to destroy it at shutdown; past it the resource is given up.
  std::chrono::milliseconds start_timeout{std::chrono::seconds(30)};
  // Longest PreStartContainer may take (releases run before it included):
  // the kubelet gives the call 30 s and retries the container start after a
  // failure, so a module that programs a device gets most of that, not
  // call_timeout. Modules see it as host->prestart_timeout_ms.
  std::chrono::milliseconds prestart_timeout{std::chrono::seconds(28)};

  // ---- pod identity and device release (docs/design.md, "Pod identity and release") ----
  // The kubelet's PodResources socket.
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  // List period while a tracked device is not free; zero turns tracking off.
  std::chrono::milliseconds pod_resources_poll{std::chrono::seconds(5)};
  // A device absent from List this long (and for two Lists) is released.
  std::chrono::milliseconds release_grace{std::chrono::seconds(10)};
  // No release this long after the kubelet restarted.
  std::chrono::milliseconds kubelet_settle{std::chrono::seconds(60)};
  // An allocated device never seen in List this long is released.
  std::chrono::milliseconds unseen_timeout{std::chrono::seconds(120)};

  // ---- operations (docs/design.md, "Reload, status, metrics") ----
  // devplugctl's read-only control socket; "" turns it off.
  std::string control_socket = "/run/devplug/control.sock";
  // Prometheus metrics over HTTP, "host:port"; "" (the default) is off.
  std::string metrics_address;

  // ---- DRA (resources with api = "dra"; docs/design.md, "DRA") ----
  // This node's name, as the API server knows it: the pool of every DRA
  // resource and its ResourceSlices' spec.nodeName. "" until loaded: then
  // $NODE_NAME, else the host name.
  std::string node_name;
  // The API server: "https://host:port", or "" for the in-cluster
  // service account ($KUBERNETES_SERVICE_HOST and the token, CA and
  // namespace under /var/run/secrets/kubernetes.io/serviceaccount).
  std::string api_server;
  // Its credentials when api_server is set: the CA bundle, and a bearer
  // token file (re-read when it changes) or a client certificate and key.
  std::string api_ca_file, api_token_file, api_client_cert, api_client_key;
  // Or a kubeconfig file (a node's /etc/kubernetes/kubelet.conf): its
  // current context's server and credentials. Not with api_server.
  std::string api_kubeconfig;
  // Where DRA resources keep their prepared claims across restarts.
  std::string dra_state_dir = "/var/lib/devplug/dra";
  // The Node label whose value ("dra" or "device-plugin") chooses the API
  // of resources with api = "node-label".
  std::string api_label = "devplug.io/api";
  // What choosing by the label said, for the log: the label's value, or
  // why it could not be read ("" when no resource asks).
  std::string api_label_note;
  // The label's value that load saw (nullopt: the Node has no such label),
  // when it read the Node (api_label_read).
  bool api_label_read = false;
  std::optional<std::string> api_label_value;
  // Where each [agent] key was set (for messages about them, e.g. a reload
  // that would change one that needs a restart).
  std::map<std::string, SourceLocation> agent_keys;

  // ---- [[resource]] tables, main file first, then drop-ins in order ----
  std::vector<ResourceConfig> resources;

  // Files read, in order (main file, then drop-ins).
  std::vector<std::string> files;
};

// The longest value each duration key accepts (its contract's maximum).
inline constexpr std::chrono::milliseconds kMaxResyncInterval = std::chrono::hours(24);
inline constexpr std::chrono::milliseconds kMinResyncInterval = std::chrono::milliseconds(100);
inline constexpr std::chrono::milliseconds kMaxStartTimeout = std::chrono::minutes(10);
inline constexpr std::chrono::milliseconds kMaxCallTimeout = std::chrono::seconds(60);
inline constexpr std::chrono::milliseconds kMaxPrestartTimeout = std::chrono::seconds(29);
inline constexpr std::chrono::milliseconds kMaxPodResourcesDuration = std::chrono::hours(1);

struct LoadOptions {
  // Default for agent.module_dir when the file does not set it.
  std::string default_module_dir;
  // Read <dir of main file>/conf.d/*.toml after the main file.
  bool read_dropins = true;
  // Command-line values that replace the files' [agent] keys. They are
  // checked like the files' values (and everything that depends on them,
  // such as socket path lengths); problems name the flag.
  std::optional<std::string> plugin_dir, module_dir, host_root;
  // agent.control_socket ("" turns it off).
  std::optional<std::string> control_socket;
  // This node's labels, for resources with api = "node-label"; nullopt when
  // they were not read (those resources then serve the device plugin API).
  std::optional<std::map<std::string, std::string>> node_labels;
  // Why they could not be read, for the note.
  std::string node_labels_error;
};

// Whether a resource of `cfg` takes its API from the Node's label.
bool UsesNodeLabel(const AgentConfig& cfg);

// Every configuration problem reads "file:line: key: problem" ("file: key:
// problem" without a line, no key part without a key).
std::string Located(const SourceLocation& where, std::string_view key, std::string_view problem);
// How messages name a key of the index-th [[resource]] table:
// "resource[2].shares".
std::string ResourceKey(size_t index, std::string_view key);

// Loads `path` (and its drop-ins). On failure the status message lists every
// problem found, one per line, each as "file:line: key: problem".
StatusOr<AgentConfig> LoadFile(const std::string& path, const LoadOptions& options);

// Parses TOML text as if it were the file `name` (no drop-ins).
StatusOr<AgentConfig> LoadString(std::string_view toml, const std::string& name,
                                 const LoadOptions& options);

// Parses "500ms", "60s", "5m", "1h30m", "0s" ("0" too); a value over `max`
// (or one that would overflow on the way) is an error that says the maximum.
// One grammar for the agent and the modules: devplug/common/duration.h.
StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text,
                                                  std::chrono::milliseconds max);
// "" when `address` can serve metrics ("" = off, or host:port), else why not.
std::string CheckMetricsAddress(std::string_view address);

// The shortest exact spelling: "24h", "90m", "29s", "1.5s", "500ms".
std::string FormatDuration(std::chrono::milliseconds d);

std::string_view LogLevelName(LogLevel level);
// "trace", "debug", "info", "warn" or "error"; false for anything else.
bool ParseLogLevel(std::string_view name, LogLevel* out);
std::string_view UdevSourceName(UdevSource source);
// "off" | "cri" | "annotations" | "both"
std::string_view CdiModeName(CdiMode mode);
bool ParseCdiMode(std::string_view text, CdiMode* out);
// "device-plugin" | "dra"
std::string_view ServingApiName(ServingApi api);
bool ParseServingApi(std::string_view text, ServingApi* out);
// The driver name a DRA resource gets without a `dra_driver` key: the name's
// part before the domain, then the domain ("devplug.io/tun" ->
// "tun.devplug.io"), lower-cased, '_' as '-'.
std::string DefaultDriverName(std::string_view resource_name);
// "" when `name` may be a DRA driver name (a DNS subdomain of at most 63
// characters), else why not.
std::string CheckDriverName(std::string_view name);
// "kubelet" | "plugin-watcher"
std::string_view RegistrationModeName(RegistrationMode mode);
bool ParseRegistrationMode(std::string_view text, RegistrationMode* out);

}  // namespace devplug::config
