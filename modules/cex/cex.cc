// cex module: IBM Crypto Express adapters on s390x (zcrypt). Each device is
// an APQN (adapter x domain) bound to cex4queue, or one share of it; the
// container gets its own zcrypt node, made at PreStart with masks that let
// it reach exactly its APQNs, mounted as /dev/z90crypt, and destroyed after
// the pod. Keys, behaviour and decisions: README.md beside this file.
//
// Beside this file: apbus (the AP bus in sysfs), zcrypt (node names, masks,
// the kernel's writes), emulator (those writes acted out on a fixture tree,
// for the test build), settings (the keys and the registry of instances).
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "apbus.h"
#include "devplug/common/cxx_module.h"
#include "devplug/common/env.h"
#include "devplug/common/fs.h"
#include "settings.h"
#include "zcrypt.h"

namespace {

using devplug::cex::ApBus;
using devplug::cex::Apqn;
using devplug::cex::Card;
using devplug::cex::Mask;
using devplug::cex::Mode;
using devplug::cex::ModeName;
using devplug::cex::Queue;
using devplug::cex::Registry;
using devplug::cex::Settings;
using devplug::cex::ZcryptOps;
using devplug::common::DeviceSink;
using devplug::common::Host;
using devplug::common::HostRoot;
using devplug::common::Ids;
using devplug::common::Instance;
using devplug::common::ModuleError;
using devplug::common::Recipe;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long PreStart waits for devtmpfs to make /dev/<node> after create.
constexpr milliseconds kNodeWait{5000};

// "03.0006" or, with shares, "03.0006::2".
struct DeviceId {
  Apqn apqn;
  int share = 0;
};

std::optional<DeviceId> ParseId(std::string_view id, int shares) {
  DeviceId d;
  std::string_view apqn = id;
  if (shares > 1) {
    const size_t at = id.find("::");
    if (at == std::string_view::npos) return std::nullopt;
    apqn = id.substr(0, at);
    std::string_view k = id.substr(at + 2);
    if (k.empty() || k.size() > 3) return std::nullopt;
    for (char c : k) {
      if (c < '0' || c > '9') return std::nullopt;
      d.share = d.share * 10 + (c - '0');
    }
    if (d.share >= shares) return std::nullopt;
  }
  auto a = devplug::cex::ParseApqn(apqn);
  if (!a) return std::nullopt;
  d.apqn = *a;
  return d;
}

std::string FormatId(const Apqn& a, int share, int shares) {
  return shares > 1 ? a.Name() + "::" + std::to_string(share) : a.Name();
}

// The machine as /proc/sysinfo names it: "<Manufacturer>-<Type>-<Sequence
// Code>"; "" when the file or a field is missing.
std::string MachineId(const HostRoot& root) {
  std::ifstream in(root.Path("/proc/sysinfo"));
  std::map<std::string, std::string> f;
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back())))
      value.pop_back();
    f.emplace(line.substr(0, colon), value);  // the first of each (the machine's, not an LPAR's)
  }
  const std::string& m = f["Manufacturer"];
  const std::string& t = f["Type"];
  const std::string& s = f["Sequence Code"];
  if (m.empty() || t.empty() || s.empty()) return "";
  return m + "-" + t + "-" + s;
}

// Why a served queue is Unhealthy ("" when it is not), the root cause
// first: a deconfigured or checkstopped card also reads offline.
std::string HealthReason(const Card& card, const Queue& q, bool multi_node) {
  if (!multi_node) return "no zcrypt multi-node support";
  if (card.chkstop || q.chkstop) return "checkstopped";
  if (!card.config || !q.config) return "deconfigured";
  if (!card.online) return "card offline";
  if (!q.online) return "queue offline";
  return "";
}

// The APQNs of one container must be every (adapter, domain) pair of their
// adapters and domains: a node's filter is apmask x aqmask, and any other
// set would open APQNs no ID gave.
void CheckRectangle(const std::set<Apqn>& apqns, std::set<int>* adapters, std::set<int>* domains) {
  for (const Apqn& a : apqns) {
    adapters->insert(a.adapter);
    domains->insert(a.domain);
  }
  if (adapters->size() * domains->size() == apqns.size()) return;
  std::string names;
  for (const Apqn& a : apqns) names += (names.empty() ? "" : ", ") + a.Name();
  throw ModuleError(EINVAL, "APQNs " + names +
                                " do not form a full adapter x domain rectangle; one zcrypt "
                                "node would open more than these (ask for one domain)");
}

class Cex : public Instance {
 public:
  Cex(Host host, Settings s, const ZcryptOps& ops)
      : Instance(host),
        s_(std::move(s)),
        ops_(ops),
        root_(std::string(host.host_root())),
        env_key_(devplug::common::EnvNameForResource("CEX_APQNS", host.resource_name())) {
    if (s_.poll_interval.count() > 0) poll_ = std::thread([this] { Poll(); });
  }
  ~Cex() override {
    {
      std::lock_guard lock(poll_mu_);
      stopping_ = true;
    }
    poll_cv_.notify_all();
    if (poll_.joinable()) poll_.join();
    Registry::Get().Remove(this);
  }

  const Settings& settings() const { return s_; }
  void ListDevices(DeviceSink& sink) override;
  bool OnUdevEvent(const devplug_udev_event& ev) override;
  bool Allocate(const Ids& ids, Recipe& resp) override;
  std::vector<std::string> PreferredAllocation(const Ids& available, const Ids& must_include,
                                               size_t size) override;
  void PreStart(const Ids& ids) override;
  bool Release(const Ids& ids) override;

 private:
  struct Served {
    std::vector<std::pair<Apqn, std::string>> health;  // per served APQN: reason
    bool multi_node = false;
    // This machine's ID when machine_id names another (nothing served).
    std::string other_machine;
  };
  // What this instance serves now, and why each is unhealthy.
  Served Scan(ApBus* bus_out);
  // The IDs of one container, parsed and sorted by ID.
  std::vector<DeviceId> Parse(const Ids& ids) const;
  void Describe(const std::vector<DeviceId>& ids, Recipe& resp) const;
  // Destroys our nodes that no pod holds: those of IDs this resource no
  // longer lists, and, once after start, those of listed IDs too.
  void Sweep(const std::set<std::string>& listed);
  bool Destroy(const std::string& node, std::string* why);
  void Poll();

  // Threads: every hook runs on the instance's worker; Poll on poll_,
  // which only scans and compares (under poll_mu_) and asks for a rescan.
  const Settings s_;
  const ZcryptOps& ops_;
  const HostRoot root_;
  const std::string env_key_;
  std::map<std::string, Apqn> known_;  // worker only: ID -> APQN, as last listed
  bool first_sweep_done_ = false;      // worker only
  std::string last_skipped_;           // worker only: what the log last said
  std::atomic<bool> sweep_due_{true};
  std::mutex poll_mu_;
  std::condition_variable poll_cv_;
  bool stopping_ = false;  // guarded by poll_mu_
  std::string digest_;     // guarded by poll_mu_: the health last listed
  std::thread poll_;       // last: started once the rest exists
};

Cex::Served Cex::Scan(ApBus* bus_out) {
  Served out;
  ApBus bus = devplug::cex::ScanApBus(root_);
  out.multi_node =
      devplug::common::Exists(root_.Path(std::string(devplug::cex::kZcryptClass) + "/create"));
  if (!s_.machine_id.empty()) {
    out.other_machine = MachineId(root_);
    if (out.other_machine.empty()) out.other_machine = "unknown: no /proc/sysinfo fields";
    if (out.other_machine == s_.machine_id) out.other_machine.clear();
  }
  if (!out.other_machine.empty()) {
    if (bus_out) *bus_out = std::move(bus);
    return out;
  }
  std::map<int, const Card*> cards;
  for (const Card& c : bus.cards) cards[c.adapter] = &c;
  for (const Queue& q : bus.queues) {
    auto it = cards.find(q.apqn.adapter);
    if (it == cards.end() || !s_.Lists(q.apqn) || !s_.Accepts(*it->second)) continue;
    if (!Registry::Get().TakenBy(this, q.apqn, *it->second).empty()) continue;
    out.health.emplace_back(q.apqn, HealthReason(*it->second, q, out.multi_node));
  }
  if (bus_out) *bus_out = std::move(bus);
  return out;
}

void Cex::ListDevices(DeviceSink& sink) {
  ApBus bus;
  Served served = Scan(&bus);
  if (!bus.present) host().Warn("no AP bus at /sys/devices/ap: this node has no crypto adapters");
  if (!served.other_machine.empty())
    host().Info("machine_id \"" + s_.machine_id + "\" is not this machine (\"" +
                served.other_machine + "\"): nothing served");
  std::string skipped;
  for (const std::string& why : bus.skipped) skipped += (skipped.empty() ? "" : "; ") + why;
  if (skipped != last_skipped_ && !skipped.empty()) host().Info("not served: " + skipped);
  last_skipped_ = skipped;

  std::map<int, const Card*> cards;
  for (const Card& c : bus.cards) cards[c.adapter] = &c;
  std::map<std::string, Apqn> known;
  std::string digest;
  for (const auto& [apqn, reason] : served.health) {
    digest += apqn.Name() + "=" + reason + ";";
    for (int k = 0; k < s_.shares; ++k) {
      const std::string id = FormatId(apqn, k, s_.shares);
      auto recipe = sink.Add(id, reason.empty(), -1, reason);
      if (!recipe) continue;
      // For DRA (ABI 1.9): which queue, and what the adapter is.
      sink.IntAttribute("adapter", apqn.adapter).IntAttribute("domain", apqn.domain);
      if (auto c = cards.find(apqn.adapter); c != cards.end()) {
        if (!c->second->type.empty()) sink.StringAttribute("type", c->second->type);
        if (c->second->mode != Mode::kAny) sink.StringAttribute("mode", ModeName(c->second->mode));
      }
      if (s_.shares > 1) sink.ShareOf(apqn.Name());
      Describe({DeviceId{apqn, k}}, *recipe);
      known.emplace(id, apqn);
    }
  }
  known_ = std::move(known);
  {
    std::lock_guard lock(poll_mu_);
    digest_ = digest;
  }
  if (served.multi_node && (sweep_due_.exchange(false) || !first_sweep_done_)) {
    std::set<std::string> listed;
    for (const auto& [id, apqn] : known_) listed.insert(id);
    Sweep(listed);
  }
}

bool Cex::OnUdevEvent(const devplug_udev_event& ev) {
  // zcrypt events are our own nodes coming and going: the list is the same.
  return ev.subsystem == nullptr || std::strcmp(ev.subsystem, "zcrypt") != 0;
}

void Cex::Poll() {
  std::unique_lock lock(poll_mu_);
  while (!stopping_) {
    poll_cv_.wait_for(lock, s_.poll_interval, [&] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    // A checkstop sends no uevent (ap_bus.c only logs it): read the state.
    std::string digest;
    for (const auto& [apqn, reason] : Scan(nullptr).health)
      digest += apqn.Name() + "=" + reason + ";";
    lock.lock();
    sweep_due_ = true;
    if (digest != digest_) {
      digest_ = digest;
      lock.unlock();
      host().DevicesChanged();
      lock.lock();
    }
  }
}

std::vector<DeviceId> Cex::Parse(const Ids& ids) const {
  std::vector<std::pair<std::string, DeviceId>> sorted;
  for (std::string_view id : ids) {
    auto d = ParseId(id, s_.shares);
    if (!d)
      throw ModuleError(EINVAL, "\"" + std::string(id) + "\" is not a device of this resource");
    sorted.emplace_back(std::string(id), *d);
  }
  if (sorted.empty()) throw ModuleError(EINVAL, "no device IDs");
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<DeviceId> out;
  for (auto& [id, d] : sorted) out.push_back(d);
  return out;
}

void Cex::Describe(const std::vector<DeviceId>& ids, Recipe& resp) const {
  std::set<Apqn> apqns;
  for (const DeviceId& d : ids) apqns.insert(d.apqn);
  std::set<int> adapters, domains;
  CheckRectangle(apqns, &adapters, &domains);
  // One node per container, named after its first ID; its masks cover all.
  resp.Node("/dev/" + devplug::cex::NodeName(ids.front().apqn, ids.front().share), "/dev/z90crypt",
            "rw");
  std::string names;
  for (const Apqn& a : apqns) names += (names.empty() ? "" : ",") + a.Name();
  resp.Env(env_key_, names);
  // The CCA library's default domain (it would take the host's otherwise).
  if (domains.size() == 1) resp.Env("CSU_DEFAULT_DOMAIN", std::to_string(*domains.begin()));
}

bool Cex::Allocate(const Ids& ids, Recipe& resp) {
  // Writes nothing: the node is made at PreStart, where a failure is a
  // retry of the container start, not a final admission error.
  Describe(Parse(ids), resp);
  return true;
}

std::vector<std::string> Cex::PreferredAllocation(const Ids& available, const Ids& must_include,
                                                  size_t size) {
  std::map<int, int> in_use;  // adapter -> IDs handed out
  std::set<std::string_view> free(available.begin(), available.end());
  for (const auto& [id, apqn] : known_)
    if (!free.count(id)) ++in_use[apqn.adapter];
  std::vector<std::pair<std::string, DeviceId>> avail;
  for (std::string_view id : available)
    if (auto d = ParseId(id, s_.shares)) avail.emplace_back(std::string(id), *d);
  // Least-used adapter first, then ID order.
  std::sort(avail.begin(), avail.end(), [&](const auto& a, const auto& b) {
    const int ua = in_use[a.second.apqn.adapter], ub = in_use[b.second.apqn.adapter];
    return ua != ub ? ua < ub : a.first < b.first;
  });
  std::vector<std::string> out(must_include.begin(), must_include.end());
  std::set<std::string> chosen(out.begin(), out.end());
  std::set<int> adapters;
  std::optional<int> domain;
  for (const std::string& id : out)
    if (auto d = ParseId(id, s_.shares)) {
      adapters.insert(d->apqn.adapter);
      if (!domain) domain = d->apqn.domain;
    }
  if (!domain && size > 0) {
    // The domain with the most distinct adapters free, so that the
    // container's APQNs share one domain (a rectangle) and spread over
    // adapters; ties go to the least-used pick above.
    std::map<int, std::set<int>> by_domain;
    for (const auto& [id, d] : avail) by_domain[d.apqn.domain].insert(d.apqn.adapter);
    size_t best = 0;
    for (const auto& [id, d] : avail)
      if (by_domain[d.apqn.domain].size() > best) {
        best = by_domain[d.apqn.domain].size();
        domain = d.apqn.domain;
      }
  }
  // Distinct adapters of the domain first, then further shares of them.
  for (const bool repeat : {false, true})
    for (const auto& [id, d] : avail) {
      if (out.size() >= size) break;
      if (chosen.count(id) || d.apqn.domain != domain) continue;
      if (!repeat && adapters.count(d.apqn.adapter)) continue;
      out.push_back(id);
      chosen.insert(id);
      adapters.insert(d.apqn.adapter);
    }
  return out;
}

void Cex::PreStart(const Ids& ids) {
  const std::vector<DeviceId> parsed = Parse(ids);
  const std::string first = FormatId(parsed.front().apqn, parsed.front().share, s_.shares);
  if (!s_.namespaces.empty()) {
    // Fail closed: a device no pod can be found for is not started.
    auto pod = host().PodOf(first);
    if (!pod)
      throw ModuleError(EACCES, "no pod holds " + first + " of " +
                                    std::string(host().resource_name()) +
                                    "; namespaces is set, so it is not started");
    if (std::find(s_.namespaces.begin(), s_.namespaces.end(), pod->pod_namespace) ==
        s_.namespaces.end()) {
      std::string allowed;
      for (const std::string& ns : s_.namespaces) allowed += (allowed.empty() ? "" : ", ") + ns;
      throw ModuleError(
          EACCES, "pod " + pod->pod_namespace + "/" + pod->pod_name + " is not allowed to use " +
                      std::string(host().resource_name()) + " (namespaces: " + allowed + ")");
    }
  }
  std::set<Apqn> apqns;
  for (const DeviceId& d : parsed) apqns.insert(d.apqn);
  std::set<int> adapters, domains;
  CheckRectangle(apqns, &adapters, &domains);

  const std::string node = devplug::cex::NodeName(parsed.front().apqn, parsed.front().share);
  const std::string dir = root_.Path(std::string(devplug::cex::kZcryptNodes) + "/" + node);
  // create is the kernel's own check: EEXIST means the node is there (left
  // by this container's earlier start, or made by a call that raced with
  // this one); it is ours by its name, and its masks are set anew below.
  if (const int rc = ops_.Create(root_, node); rc == -ENOSPC)
    throw ModuleError(EAGAIN, "zcrypt nodes exhausted (" + std::to_string(devplug::cex::kMaxNodes) +
                                  " per host): cannot create " + node);
  else if (rc < 0 && rc != -EEXIST)
    throw ModuleError(EIO, "create " + node + ": " + std::strerror(-rc));
  if (!devplug::common::Exists(dir))
    throw ModuleError(EIO, "create " + node + ": no " + dir + " afterwards");
  // All four absolutely: a node left by an earlier run is made right too.
  Mask ap, aq, ad;
  for (int a : adapters) ap.set(static_cast<size_t>(a));
  for (int d : domains) aq.set(static_cast<size_t>(d));
  if (s_.control_domains) ad = aq;
  const std::pair<const char*, Mask> masks[] = {
      {"apmask", ap}, {"aqmask", aq}, {"ioctlmask", s_.ioctls}, {"admask", ad}};
  for (const auto& [file, mask] : masks) {
    const std::string path = dir + "/" + file;
    // No admask: a kernel without control-domain filtering (zcryptctl(8)).
    if (std::strcmp(file, "admask") == 0 && !devplug::common::Exists(path)) continue;
    const std::string want = devplug::cex::FormatMask(mask);
    if (const int rc = ops_.WriteMask(path, want); rc < 0)
      throw ModuleError(EIO, node + ": writing " + file + ": " + std::strerror(-rc));
    auto back = devplug::common::ReadAttr(path);
    if (!back || *back != want)
      throw ModuleError(EIO, node + ": " + file + " reads back \"" +
                                 (back ? *back : back.error().ToString()) + "\", not \"" + want +
                                 "\"");
  }
  // devtmpfs makes /dev/<node> after the uevent: wait for the numbers the
  // kernel gave it.
  auto dev = devplug::common::ReadAttr(dir + "/dev");
  unsigned major = 0, minor = 0;
  if (!dev || std::sscanf(dev->c_str(), "%u:%u", &major, &minor) != 2)
    throw ModuleError(EIO, node + ": no device numbers in " + dir + "/dev");
  const std::string path = root_.Path("/dev/" + node);
  const auto deadline = Clock::now() + kNodeWait;
  struct stat st {};
  milliseconds step{1};
  for (;;) {
    if (stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(major, minor))
      break;
    if (Clock::now() >= deadline)
      throw ModuleError(EAGAIN, "/dev/" + node + " (" + std::to_string(major) + ":" +
                                    std::to_string(minor) + ") did not appear within " +
                                    std::to_string(kNodeWait.count() / 1000) + " s");
    std::this_thread::sleep_for(step);
    step = std::min(step * 2, milliseconds(50));
  }
  if ((st.st_mode & 07777) != s_.node_mode && chmod(path.c_str(), s_.node_mode) != 0)
    throw ModuleError(EIO, "chmod " + path + ": " + std::strerror(errno));
}

bool Cex::Destroy(const std::string& node, std::string* why) {
  const int rc = ops_.Destroy(root_, node);
  if (rc == 0 || rc == -ENOENT) return true;  // ENOENT: never made, or gone
  *why = "destroy " + node + ": " + std::strerror(-rc);
  return false;
}

bool Cex::Release(const Ids& ids) {
  // Each ID owns its node (its container's first ID names it): destroy
  // it. An fd still open keeps working until closed (the kernel counts
  // references), so this never waits for the pod's processes.
  std::string errors;
  for (std::string_view id : ids) {
    auto d = ParseId(id, s_.shares);
    if (!d) continue;  // not one of ours: nothing was made for it
    std::string why;
    if (!Destroy(devplug::cex::NodeName(d->apqn, d->share), &why))
      errors += (errors.empty() ? "" : "; ") + why;
  }
  if (!errors.empty()) throw ModuleError(EIO, errors);
  return true;
}

void Cex::Sweep(const std::set<std::string>& listed) {
  auto nodes = devplug::common::ListDir(root_.Path(devplug::cex::kZcryptNodes));
  if (!nodes) return;
  bool asked = true;
  for (const std::string& node : *nodes) {
    Apqn apqn;
    int share = 0;
    if (!devplug::cex::ParseNodeName(node, &apqn, &share) || !s_.Lists(apqn)) continue;
    const std::string id = FormatId(apqn, share, s_.shares);
    const bool ours_now = listed.count(id) > 0;
    // A node of an ID we list is released by the agent after its pod; at
    // start, only the kubelet knows whether one still holds it.
    if (ours_now && first_sweep_done_) continue;
    if (!ours_now && Registry::Get().ListedByOther(this, apqn)) continue;
    // Pods started under another `shares` hold the node under the ID form
    // of then: "03.0006::1" (shares > 1), or "03.0006" for share 0 (shares
    // = 1). Each form is asked before the node goes (review D12).
    std::vector<std::string> forms{id};
    for (const std::string& other : {FormatId(apqn, share, 2), FormatId(apqn, share, 1)})
      if (other != id && (other.find("::") != std::string::npos || share == 0))
        forms.push_back(other);
    bool held = false;
    try {
      for (const std::string& form : forms)
        if (host().PodOf(form)) {
          held = true;  // a container may restart on it
          break;
        }
    } catch (const ModuleError& e) {
      if (e.code() == EAGAIN) {
        asked = false;  // the kubelet cannot be asked now: next time
        continue;
      }
      if (e.code() == ENOTUNIQ) continue;
      throw;
    }
    if (held) continue;
    std::string why;
    if (Destroy(node, &why))
      host().Info("destroyed " + node + ": no pod holds " + id);
    else
      host().Warn(why);
  }
  if (asked) first_sweep_done_ = true;
}

std::unique_ptr<Instance> Create(Host& host) {
  std::optional<Settings> s = devplug::cex::ParseSettings(host);
  if (!s) return nullptr;
  auto inst = std::make_unique<Cex>(host, std::move(*s), devplug::cex::ModuleOps());
  auto [key, why] = Registry::Get().Add({inst.get(), std::string(host.resource_name()),
                                         host.ResourceIndex().value_or(0), &inst->settings()});
  if (!why.empty()) {
    host.ConfigError(key.c_str(), why);
    return nullptr;
  }
  return inst;
}

// Cards and queues come and go, change state and driver on the ap bus;
// zcrypt's own nodes announce themselves on zcrypt.
const char* const kSubsystems[] = {"ap", "zcrypt", nullptr};

}  // namespace

DEVPLUG_CXX_MODULE(cex_module, "cex", "1.0.0",
                   "IBM Crypto Express APQNs (s390x zcrypt), one zcrypt node per container",
                   devplug::cex::kSettingsKeys, kSubsystems, Create,
                   devplug::common::kHookUdev | devplug::common::kHookAllocate |
                       devplug::common::kHookPreferred | devplug::common::kHookPreStart |
                       devplug::common::kHookRelease)
