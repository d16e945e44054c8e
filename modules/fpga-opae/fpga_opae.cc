// fpga-opae module: FPGA ports of the DFL and intel-fpga drivers, handed out
// already programmed (mode "af") or programmed with the resource's
// accelerator before the container starts (modes "region", "region-devel"),
// and cleaned up after the pod (release_actions). Keys and behaviour:
// README.md beside this file.
//
// Devices: one per port, ID = the port's name ("dfl-port.0"). Instances of
// this module share the hardware; claims.h decides which one serves a port.
// Beside this file: settings (the keys), claims, alarm (the module's own
// thread: failure holds and the state poll), dfl (sysfs and ioctls), gbs
// (bitstream files).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "alarm.h"
#include "claims.h"
#include "devplug/common/cxx_module.h"
#include "devplug/common/duration.h"
#include "devplug/common/env.h"
#include "devplug/common/fs.h"
#include "devplug/common/pci.h"
#include "devplug/common/run.h"
#include "dfl.h"
#include "gbs.h"
#include "settings.h"

namespace {

using devplug::common::DeviceSink;
using devplug::common::Host;
using devplug::common::HostRoot;
using devplug::common::Ids;
using devplug::common::Instance;
using devplug::common::ModuleError;
using devplug::common::Recipe;
using devplug::fpga::Alarm;
using devplug::fpga::AllF;
using devplug::fpga::Claims;
using devplug::fpga::Contains;
using devplug::fpga::Driver;
using devplug::fpga::Mode;
using devplug::fpga::Port;
using devplug::fpga::PortFacts;
using devplug::fpga::ProgramWith;
using devplug::fpga::Selects;
using devplug::fpga::Settings;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// afu_id reads fail with EBUSY while a port is in reset; how often to retry.
constexpr milliseconds kBusyRetry{20};

class FpgaOpae : public Instance {
 public:
  FpgaOpae(Host host, Settings s, const devplug::fpga::DeviceOps& ops)
      : Instance(host),
        s_(std::move(s)),
        ops_(ops),
        root_(std::string(host.host_root())),
        alarm_(host, s_.state_poll, [this] { return StateChanged(); }) {
    driver_ = s_.driver ? *s_.driver : devplug::fpga::DetectDriver(root_);
    Claims::Get().Add({this, std::string(host.resource_name()), host.ResourceIndex().value_or(0),
                       &s_, &this->host()});
    // Port nodes made or removed without a uevent are still seen at once.
    (void)this->host().WatchPath(driver_ == Driver::kDfl ? "/dev/dfl-port.*"
                                                         : "/dev/intel-fpga-port.*");
  }
  ~FpgaOpae() override { Claims::Get().Remove(this); }

  void ListDevices(DeviceSink& sink) override;
  bool Allocate(const Ids& ids, Recipe& resp) override;
  std::vector<std::string> PreferredAllocation(const Ids& available, const Ids& must_include,
                                               size_t size) override;
  void PreStart(const Ids& ids) override;
  bool Release(const Ids& ids) override;

 private:
  struct Known {
    Port port;
    std::optional<std::string> afu_id;  // as of the last scan
  };

  // The port `id` as the last scan found it (a copy: safe on either lane).
  Port Find(std::string_view id) const {
    std::lock_guard lock(state_mu_);
    auto it = known_.find(std::string(id));
    if (it == known_.end()) throw ModuleError(ENOENT, "unknown port \"" + std::string(id) + "\"");
    return it->second.port;
  }
  // Why `name` is held back after a failed programming, if it still is
  // (an expired hold is dropped).
  std::optional<std::string> HeldBack(const std::string& name, Clock::time_point now);
  // afu_id now, retrying EBUSY (a port in reset) until `deadline`.
  devplug::common::Result<std::string> ReadAfu(const Port& p, Clock::time_point deadline) const;
  // Programs `p` with accelerator `afu` unless it already holds it; "" or why not.
  std::string Program(const Port& p, const std::string& afu, Clock::time_point deadline);
  std::string ProgramWithFpgaconf(const Port& p, const std::string& gbs,
                                  Clock::time_point deadline);
  void Hold(const Port& p, const std::string& why);
  // A programming of `p` succeeded (or it holds the accelerator): an
  // earlier failure no longer holds it back.
  void EndHold(const Port& p);
  std::string ReleaseOne(const Port& p);
  // The state poll (Alarm's thread): afu_id and power_state of every port
  // the last scan listed, against what it read then. True on a change.
  bool StateChanged();

  // Threads: ListDevices, Allocate and PreferredAllocation run on the
  // instance's worker; PreStart and Release on the agent's lanes at the
  // same time, those of different ports at the same time as each other
  // (kConcurrentDevices: two pods' ports are programmed together, and one
  // port's long scrub never delays another's container start); the state
  // poll on alarm_'s thread. The worker alone writes known_ (under
  // state_mu_) and reads it freely; the lanes read it under state_mu_
  // (Find). holds_ is written by all, always under state_mu_. No lock is
  // held across programming or a release action: the kernel serializes
  // partial reconfigurations of one card (the FME's own lock), and
  // fpgaconf and the release command are separate processes.
  const Settings s_;
  const devplug::fpga::DeviceOps& ops_;  // the driver's, or the test fixture's
  const HostRoot root_;
  Driver driver_ = Driver::kDfl;
  mutable std::mutex state_mu_;
  std::map<std::string, Known> known_;  // ports listed by the last scan
  std::set<std::string> listed_;        // worker only: ever listed and still present
  struct HoldState {
    Clock::time_point until;
    std::string why;
  };
  std::map<std::string, HoldState> holds_;  // guarded by state_mu_
  // What the state poll compares: attribute path -> text the last scan (or
  // poll) read ("" when unreadable).
  std::mutex polled_mu_;
  std::map<std::string, std::string> polled_;  // guarded by polled_mu_
  Alarm alarm_;                                // last: its thread stops before the rest goes
};

std::string ReadOrEmpty(const std::string& path) {
  auto text = devplug::common::ReadAttr(path);
  return text ? *text : std::string();
}

bool FpgaOpae::StateChanged() {
  std::lock_guard lock(polled_mu_);
  bool changed = false;
  for (auto& [path, last] : polled_) {
    std::string now = ReadOrEmpty(path);
    if (now != last) {
      last = std::move(now);
      changed = true;
    }
  }
  return changed;
}

devplug::common::Result<std::string> FpgaOpae::ReadAfu(const Port& p,
                                                       Clock::time_point deadline) const {
  for (;;) {
    auto text = devplug::common::ReadAttr(p.sys_dir + "/afu_id");
    if (!text && text.error().code == EBUSY && Clock::now() + kBusyRetry < deadline) {
      std::this_thread::sleep_for(kBusyRetry);
      continue;
    }
    if (!text) return text.error();
    auto id = devplug::fpga::CanonicalId(*text);
    if (!id)
      return devplug::common::FsError{EINVAL, p.sys_dir + "/afu_id", "not a 32-digit hex ID"};
    return *id;
  }
}

void FpgaOpae::ListDevices(DeviceSink& sink) {
  const auto now = Clock::now();
  std::map<std::string, Known> known;
  std::set<std::string> listed;
  std::map<std::string, devplug::common::Result<std::string>> iface_cache;
  // For the state poll: every port the selectors allow, listed or not (an
  // af resource gains a port loaded with its accelerator by hand).
  std::map<std::string, std::string> polled;
  for (Port& p : devplug::fpga::DiscoverPorts(root_, driver_)) {
    if (!s_.addresses.empty() && !Contains(s_.addresses, p.function)) continue;
    if (!s_.ports.empty() && !Contains(s_.ports, p.name)) continue;
    if (s_.state_poll.count() > 0)
      for (const char* attr : {"/afu_id", "/power_state"})
        polled[p.sys_dir + attr] = ReadOrEmpty(p.sys_dir + attr);
    const bool was_listed = listed_.count(p.name) > 0;
    PortFacts facts{p.name, p.function, std::nullopt, std::nullopt};

    std::string reason;          // first reason for Unhealthy
    auto afu = ReadAfu(p, now);  // no retry: a busy port keeps what it had
    if (afu) {
      facts.afu_id = *afu;
    } else if (afu.error().code == EBUSY) {
      if (auto old = known_.find(p.name); old != known_.end()) facts.afu_id = old->second.afu_id;
    } else {
      reason = "afu_id unreadable: " + afu.error().ToString();
    }
    // Read even when this instance needs none: other resources' claims
    // may depend on it.
    std::optional<std::string> iface_error;
    {
      // One read per card and scan: its ports share the FME.
      auto cached = iface_cache.find(p.fme_dir);
      if (cached == iface_cache.end())
        cached = iface_cache.emplace(p.fme_dir, devplug::fpga::ReadInterfaceId(p)).first;
      const auto& iface = cached->second;
      if (!iface)
        iface_error = "interface ID unreadable: " + iface.error().ToString();
      else if (AllF(*iface))
        iface_error = "interface ID is all f (" + p.fme + ")";
      else
        facts.interface_id = *iface;
    }

    // Is it ours? A port listed once stays listed while only its IDs
    // cannot be read (it turns Unhealthy instead).
    bool selected = Selects(s_, facts);
    if (!selected && was_listed) {
      // Still ours if it fails to match only because an ID cannot be read
      // now; it turns Unhealthy instead.
      PortFacts assumed = facts;
      if (!assumed.interface_id && iface_error) assumed.interface_id = s_.interface_id;
      if (!assumed.afu_id && !s_.region()) assumed.afu_id = s_.afu_id;
      selected = Selects(s_, assumed);
    }
    if (!selected) continue;
    if (!Claims::Get().TakenBy(this, facts).empty()) continue;

    if (reason.empty() && iface_error && (s_.region() || s_.interface_id)) reason = *iface_error;
    if (reason.empty() && facts.afu_id && AllF(*facts.afu_id))
      reason = "afu_id is all f (no usable accelerator; firmware crashed?)";
    if (reason.empty() && !devplug::common::IsCharDevice(root_.Path(p.node)))
      reason = p.node + " missing";
    if (reason.empty()) {
      // Printed "0x%x"; 6 is AP6 (throttled).
      if (auto ps = devplug::common::ReadHexAttr(p.sys_dir + "/power_state"); ps && *ps == 6)
        reason = "power state AP6";
    }
    if (reason.empty() && s_.health_errors) {
      if (auto e = devplug::common::ReadAttr(p.sys_dir + "/errors/errors")) {
        auto v = devplug::common::ParseHex(*e);
        if (!v || *v != 0) reason = "port errors " + *e;
      }
    }
    if (auto why = HeldBack(p.name, now); why && reason.empty())
      reason = "programming failed: " + *why;
    if (sink.Add(p.name, reason.empty(), p.numa_node, reason)) {
      // For DRA (ABI 1.9): the function carrying the port, the FPGA's
      // interface (the FIM a bitstream must match) and its accelerator.
      if (!p.function.empty()) sink.Pci(p.function);
      if (facts.interface_id) sink.StringAttribute("interfaceID", *facts.interface_id);
      if (facts.afu_id) sink.StringAttribute("afuID", *facts.afu_id);
    }
    listed.insert(p.name);
    known[p.name] = Known{p, facts.afu_id};
  }
  if (s_.state_poll.count() > 0) {
    std::lock_guard lock(polled_mu_);
    polled_ = std::move(polled);
  }
  {
    std::lock_guard lock(state_mu_);
    known_ = std::move(known);
  }
  listed_ = std::move(listed);
}

std::optional<std::string> FpgaOpae::HeldBack(const std::string& name, Clock::time_point now) {
  std::lock_guard lock(state_mu_);
  auto h = holds_.find(name);
  if (h == holds_.end()) return std::nullopt;
  if (h->second.until > now) return h->second.why;
  holds_.erase(h);
  return std::nullopt;
}

bool FpgaOpae::Allocate(const Ids& ids, Recipe& resp) {
  std::vector<std::string> functions;
  std::set<std::string> fmes;
  for (std::string_view id : ids) {
    const Port p = Find(id);
    resp.Node(p.node);
    if (s_.mode == Mode::kRegionDevel && !p.fme_node.empty() && fmes.insert(p.fme_node).second)
      resp.Node(p.fme_node);
    if (!p.function.empty() && !Contains(functions, p.function)) functions.push_back(p.function);
  }
  if (s_.env && !functions.empty()) {
    std::string value;
    for (const std::string& f : functions) value += (value.empty() ? "" : ",") + f;
    resp.Env(devplug::common::EnvNameStrict("FPGA_RESOURCE", host().resource_name()), value);
  }
  return true;
}

std::vector<std::string> FpgaOpae::PreferredAllocation(const Ids& available,
                                                       const Ids& must_include, size_t size) {
  struct Cand {
    std::string id;
    bool ready = false;  // already holds the accelerator
    int numa = -1;
  };
  std::vector<std::string> out;
  std::set<std::string> taken;
  std::vector<std::string> must(must_include.begin(), must_include.end());
  std::sort(must.begin(), must.end(), devplug::fpga::NaturalLess);
  for (const std::string& m : must)
    if (taken.insert(m).second) out.push_back(m);
  std::vector<Cand> pool;
  std::map<int, size_t> per_node;
  for (std::string_view a : available) {
    std::string id(a);
    if (taken.count(id)) continue;
    taken.insert(id);
    Cand c{id, false, -1};
    if (auto it = known_.find(id); it != known_.end()) {
      c.ready = it->second.afu_id == s_.afu_id;
      c.numa = it->second.port.numa_node;
    }
    if (c.numa >= 0) ++per_node[c.numa];
    pool.push_back(std::move(c));
  }
  // The node that can hold the whole request with the most ports to choose
  // from; failing that, the one with the most; ties: the lower node.
  const size_t want = size > out.size() ? size - out.size() : 0;
  int node = -1;
  size_t best = 0;
  bool best_fits = false;
  for (const auto& [n, count] : per_node) {
    const bool fits = count >= want;
    if (node < 0 || (fits && !best_fits) || (fits == best_fits && count > best)) {
      node = n;
      best = count;
      best_fits = fits;
    }
  }
  std::sort(pool.begin(), pool.end(), [&](const Cand& a, const Cand& b) {
    if (a.ready != b.ready) return a.ready;
    const bool an = a.numa == node && node >= 0, bn = b.numa == node && node >= 0;
    if (an != bn) return an;
    return devplug::fpga::NaturalLess(a.id, b.id);
  });
  for (const Cand& c : pool) {
    if (out.size() >= size) break;
    out.push_back(c.id);
  }
  return out;
}

void FpgaOpae::EndHold(const Port& p) {
  bool ended = false;
  {
    std::lock_guard lock(state_mu_);
    ended = holds_.erase(p.name) > 0;
  }
  if (ended) host().DevicesChanged();
}

void FpgaOpae::Hold(const Port& p, const std::string& why) {
  if (s_.failure_hold.count() <= 0) return;
  const auto until = Clock::now() + s_.failure_hold;
  {
    std::lock_guard lock(state_mu_);
    holds_[p.name] = HoldState{until, why};
  }
  alarm_.At(until);
  host().DevicesChanged();
}

std::string FpgaOpae::ProgramWithFpgaconf(const Port& p, const std::string& gbs,
                                          Clock::time_point deadline) {
  // "dddd:bb:dd.f" of the PF: fpgaconf finds the card by bus/device/function.
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (p.pf.empty() || sscanf(p.pf.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4)
    return "no PCI address known for " + p.name + "'s card; fpgaconf needs one";
  char b[8], d[8], f[8], seg[12];
  snprintf(b, sizeof b, "0x%02x", bus);
  snprintf(d, sizeof d, "0x%02x", dev);
  snprintf(f, sizeof f, "0x%x", fn);
  snprintf(seg, sizeof seg, "0x%04x", domain);
  std::vector<std::string> argv{s_.fpgaconf, "-B", b, "-D", d, "-F", f};
  if (domain != 0) {
    argv.emplace_back("--segment");
    argv.emplace_back(seg);
  }
  argv.push_back(gbs);
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return "program_timeout passed before fpgaconf could run";
  devplug::common::RunResult r = devplug::common::RunProgram(argv, {}, left);
  if (r.ok()) return "";
  // Timed out: within program_timeout, counted from the start of the step.
  return r.Describe(s_.fpgaconf, s_.program_timeout);
}

std::string FpgaOpae::Program(const Port& p, const std::string& afu, Clock::time_point deadline) {
  auto now_afu = ReadAfu(p, deadline);
  if (now_afu && *now_afu == afu) return "";
  auto iface = devplug::fpga::ReadInterfaceId(p);
  if (!iface)
    return "interface ID of " + p.name + "'s card unreadable: " + iface.error().ToString();
  const std::string rel = s_.bitstream_dir + "/" + *iface + "/" + afu + ".gbs";
  const std::string path = root_.Path(rel);
  auto parsed = devplug::fpga::ReadGbs(path);
  if (auto* e = std::get_if<std::string>(&parsed)) return *e;
  const auto& gbs = std::get<devplug::fpga::GbsInfo>(parsed);
  if (gbs.interface_id != *iface)
    return path + ": made for interface " + gbs.interface_id + ", but " + p.name + "'s card has " +
           *iface;
  if (!gbs.HasAfu(afu)) {
    std::string have;
    for (const std::string& a : gbs.afu_ids) have += (have.empty() ? "" : ", ") + a;
    return path + ": holds accelerator " + have + ", not " + afu;
  }
  auto port_id = devplug::common::ReadIntAttr(p.sys_dir + "/id");
  if (!port_id && driver_ == Driver::kDfl)
    return "cannot read the port index: " + port_id.error().ToString();
  const int64_t id = port_id.value_or(0);
  const bool have_fpgaconf = access(s_.fpgaconf.c_str(), X_OK) == 0;
  bool use_fpgaconf = s_.program_with == ProgramWith::kFpgaconf ||
                      (s_.program_with == ProgramWith::kAuto && have_fpgaconf && id == 0);
  std::string err;
  if (use_fpgaconf) {
    if (id != 0)
      return "fpgaconf programs slot 0 only, and " + p.name + " is port " + std::to_string(id) +
             " of its card (program_with = \"ioctl\" can program it)";
    err = ProgramWithFpgaconf(p, path, deadline);
  } else {
    if (s_.program_with == ProgramWith::kAuto && gbs.user_clock)
      return path + ": needs user clocks (" + gbs.clock_text + "), which only fpgaconf sets, and " +
             (have_fpgaconf ? p.name + " is not port 0" : s_.fpgaconf + " is not installed") +
             " (program_with = \"ioctl\" programs without setting them)";
    if (p.fme_node.empty()) return "no FME found for " + p.name + "; cannot program it";
    std::string bits;
    if (std::string e = devplug::fpga::ReadBitstream(path, gbs, &bits); !e.empty()) return e;
    err = devplug::fpga::ProgramByIoctl(ops_, driver_, root_.Path(p.fme_node),
                                        static_cast<uint32_t>(id), bits);
    if (err.empty() && Clock::now() > deadline)
      err = "programming took longer than program_timeout (" +
            devplug::common::FormatDuration(s_.program_timeout) + ")";
  }
  if (!err.empty()) return err;
  // What the port says now is what counts.
  auto after = ReadAfu(p, deadline);
  if (!after) return "after programming, " + after.error().ToString();
  if (*after != afu)
    return "after programming with " + path + ", " + p.name + " holds accelerator " + *after +
           ", not " + afu;
  host().Info("programmed " + p.name + " with " + afu + " from " + rel);
  EndHold(p);
  return "";
}

void FpgaOpae::PreStart(const Ids& ids) {
  if (!s_.region()) return;  // af: ports are served as they are programmed
  // One budget for the whole call, however many ports it programs:
  // program_timeout is below the agent's prestart_timeout.
  const auto deadline = Clock::now() + s_.program_timeout;
  for (std::string_view id : ids) {
    const Port p = Find(id);
    // Every container restart comes here: a port that holds the accelerator
    // costs one read, and no rescan.
    if (auto now = ReadAfu(p, deadline); now && *now == s_.afu_id) {
      EndHold(p);
      continue;
    }
    const std::string err = Program(p, s_.afu_id, deadline);
    host().DevicesChanged();  // its afu_id may have changed, whatever the outcome
    Claims::Get().Changed(this);
    if (!err.empty()) {
      Hold(p, err);
      throw ModuleError(EIO, p.name + ": " + err);
    }
  }
}

std::string FpgaOpae::ReleaseOne(const Port& p) {
  if (s_.Releases("clear-errors")) {
    const std::string path = p.sys_dir + "/errors/errors";
    auto text = devplug::common::ReadAttr(path);
    if (!text) return "clear-errors: " + text.error().ToString();
    auto value = devplug::common::ParseHex(*text);
    if (!value) return "clear-errors: " + path + ": \"" + *text + "\" is not a hex number";
    if (*value != 0) {
      // The kernel clears the bits written back.
      const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) return "clear-errors: " + path + ": " + std::strerror(errno);
      const ssize_t n = write(fd, text->data(), text->size());
      const int err = errno;
      close(fd);
      // The driver refuses (EINVAL) a value that no longer matches.
      if (n < 0) return "clear-errors: " + path + ": " + std::strerror(err);
    }
  }
  if (s_.Releases("program-idle")) {
    const std::string err = Program(p, s_.idle_afu_id, Clock::now() + s_.program_timeout);
    host().DevicesChanged();
    if (!err.empty()) return "program-idle: " + err;
  }
  if (s_.Releases("command")) {
    auto iface = devplug::fpga::ReadInterfaceId(p);
    auto afu = ReadAfu(p, Clock::now() + std::chrono::seconds(1));
    std::vector<std::string> env{
        "DEVPLUG_RESOURCE=" + std::string(host().resource_name()),
        "DEVPLUG_DEVICE_ID=" + p.name,
        "DEVPLUG_PORT_DEV=" + p.node,
        "DEVPLUG_FME_DEV=" + p.fme_node,
        "DEVPLUG_PCI_ADDRESS=" + p.function,
        "DEVPLUG_AFU_ID=" + (afu ? *afu : std::string()),
        "DEVPLUG_INTERFACE_ID=" + (iface ? *iface : std::string()),
    };
    auto r = devplug::common::RunProgram({s_.release_command}, env, s_.release_timeout);
    if (!r.ok()) return "command: " + r.Describe(s_.release_command, s_.release_timeout);
  }
  return "";
}

bool FpgaOpae::Release(const Ids& ids) {
  const auto& ops = ops_;
  // The in-use probe for every port first: one still open anywhere means the
  // pod is not gone yet, and nothing is touched.
  std::vector<std::pair<Port, int>> opened;
  auto close_all = [&] {
    for (auto& [p, fd] : opened)
      if (fd >= 0) ops.close(fd);
    opened.clear();
  };
  for (std::string_view id : ids) {
    std::optional<Port> found;
    {
      std::lock_guard lock(state_mu_);
      if (auto it = known_.find(std::string(id)); it != known_.end()) found = it->second.port;
    }
    if (!found) {
      close_all();
      throw ModuleError(ENOENT, std::string(id) + ": port gone");
    }
    const Port& p = *found;
    const std::string path = root_.Path(p.node);
    const int fd = devplug::fpga::ProbeExclusive(ops, path);
    if (fd == -EBUSY) {
      close_all();
      host().Debug(p.name + " is still open somewhere; release later");
      return false;
    }
    if (fd < 0) {
      close_all();
      throw ModuleError(EIO, p.name + ": in-use probe: " + p.node + ": " + std::strerror(-fd));
    }
    opened.emplace_back(p, fd);
  }
  std::string err;
  for (auto& [p, fd] : opened) {
    if (err.empty() && s_.Releases("reset")) {
      const int rc = ops.ioctl(fd, root_.Path(p.node), devplug::fpga::ResetIoctl(driver_), nullptr);
      if (rc < 0) err = p.name + ": reset: " + p.node + ": " + std::strerror(-rc);
    }
    ops.close(fd);  // the last close resets the port too
    fd = -1;
  }
  for (auto& [p, fd] : opened) {
    if (!err.empty()) break;
    if (std::string e = ReleaseOne(p); !e.empty()) err = p.name + ": " + e;
  }
  opened.clear();
  if (!err.empty()) throw ModuleError(EIO, err);
  return true;
}

// ---- configuration ----------------------------------------------------------------------------

std::unique_ptr<Instance> Create(Host& host) {
  std::optional<Settings> s = devplug::fpga::ParseSettings(host);
  if (!s) return nullptr;
  // Without release actions there is nothing to do after a pod.
  if (s->release_actions.empty()) host.TrackReleases(false);
  return std::make_unique<FpgaOpae>(host, std::move(*s), devplug::fpga::ModuleDeviceOps());
}

// Every event of these subsystems rescans (no filter on the device's name):
// a port's state can change with events of other devices of its card.
const char* const kSubsystems[] = {"fpga_region", "fpga", "platform", "pci", nullptr};

}  // namespace

DEVPLUG_CXX_MODULE(fpga_opae_module, "fpga-opae", "1.0.0",
                   "Intel FPGA ports (DFL and intel-fpga drivers), programmed per workload",
                   devplug::fpga::kSettingsKeys, kSubsystems, Create,
                   devplug::common::kHookAllocate | devplug::common::kHookPreferred |
                       devplug::common::kHookPreStart | devplug::common::kHookRelease |
                       devplug::common::kConcurrentDevices)
