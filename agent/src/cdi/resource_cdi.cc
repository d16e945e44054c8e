#include "cdi/resource_cdi.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <fstream>
#include <map>

#include <spdlog/spdlog.h>

#include "cdi/spec_dir.h"

namespace devplug::cdi {
namespace {

// Whether one of `ids` is in `set`.
bool AnyIn(const std::vector<std::string>& ids, const std::set<std::string>& set) {
  return std::any_of(ids.begin(), ids.end(), [&](const std::string& id) { return set.count(id); });
}

}  // namespace

std::optional<NodeInfo> LookUpNode(const std::string& host_root, const std::string& host_path) {
  struct stat st {};
  // The host's symlinks (/dev/serial/by-id/...) point at host paths: an
  // absolute target is taken under host_root again.
  std::string path = host_path;
  for (int hop = 0; hop < 8; ++hop) {
    const std::string at = UnderHostRoot(host_root, path);
    if (::lstat(at.c_str(), &st) != 0) return std::nullopt;
    if (!S_ISLNK(st.st_mode)) break;
    char target[4096];
    const ssize_t n = ::readlink(at.c_str(), target, sizeof target - 1);
    if (n <= 0) return std::nullopt;
    target[n] = '\0';
    if (target[0] == '/') {
      path = target;
    } else {
      path = path.substr(0, path.rfind('/') + 1) + target;
    }
  }
  if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode)) return std::nullopt;
  return NodeInfo{S_ISCHR(st.st_mode) ? 'c' : 'b', major(st.st_rdev), minor(st.st_rdev)};
}

StatusOr<std::shared_ptr<ResourceCdi>> ResourceCdi::Make(Options options) {
  auto kind = KindOf(options.resource);
  if (!kind.ok()) return kind.status();
  std::shared_ptr<ResourceCdi> r(new ResourceCdi(std::move(options), std::move(*kind)));
  MutexLock lock(r->mu_);
  r->active_ = r->options_.active;
  if (r->active_ && r->options_.mode != CdiMode::kOff) r->LoadAllocationsLocked();
  return r;
}

void ResourceCdi::Publish(const DeviceList& list) {
  if (options_.mode == CdiMode::kOff) return;
  // Shared devices (shares = 110) name one node 110 times: look it up once.
  std::map<std::string, std::optional<NodeInfo>> seen;
  Rendered next = Render(kind_, list, [&](const std::string& p) {
    auto [it, fresh] = seen.try_emplace(p);
    if (fresh) it->second = LookUpNode(options_.host_root, p);
    return it->second;
  });
  MutexLock lock(mu_);
  for (const auto& [id, why] : next.skipped) {
    if (skip_told_.insert(id).second)
      spdlog::info(
          "resource \"{}\": device {} has no entry in the resource's CDI spec ({}); Allocate "
          "names it only where the module's own answer gets an allocation spec",
          options_.resource, id, why);
  }
  pending_ = std::move(next);
  if (!active_) return;
  WriteLocked();
  if (!allocations_.empty()) {
    std::set<std::string> listed;
    for (const Device& d : list) listed.insert(d.id);
    DropAllocationsLocked(
        [&](const std::string&, const Allocation& a) {
          return !std::all_of(a.ids.begin(), a.ids.end(),
                              [&](const std::string& id) { return listed.count(id); });
        },
        "a device of it left the list");
  }
}

void ResourceCdi::Activate() {
  MutexLock lock(mu_);
  active_ = true;
  WriteLocked();
  if (options_.mode != CdiMode::kOff) LoadAllocationsLocked();
}

std::string ResourceCdi::Dir() const { return UnderHostRoot(options_.host_root, options_.dir); }

void ResourceCdi::LoadAllocationsLocked() {
  if (allocations_loaded_) return;
  allocations_loaded_ = true;
  const std::string dir = Dir();
  const std::string index = AllocationIndexName(kind_);
  std::ifstream in(dir + "/" + index);
  if (in) {
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object()) {
      for (const auto& [name, ids] : j.items()) {
        if (!ids.is_array() || CheckDeviceName(name) != "") continue;
        std::vector<std::string> v;
        for (const auto& id : ids)
          if (id.is_string()) v.push_back(id.get<std::string>());
        allocations_[name] = {std::move(v), std::chrono::steady_clock::time_point::min()};
      }
    } else {
      spdlog::warn(
          "resource \"{}\": CDI: {}/{} is not a JSON object; its allocation specs are "
          "removed",
          options_.resource, options_.dir, index);
    }
  }
  // A spec whose entry the index lacks (a stop between the two writes)
  // names IDs no release can find: it goes.
  for (const std::string& f : OwnedFiles(dir)) {
    if (!KindOwnsFile(kind_, f) || f == file_name() || f == index) continue;
    const bool indexed = std::any_of(allocations_.begin(), allocations_.end(), [&](const auto& a) {
      return f == AllocationFileName(kind_, a.first);
    });
    if (indexed) continue;
    if (Status st = RemoveSpecFile(dir, f); !st.ok()) spdlog::warn("CDI: {}", st.message());
  }
  if (!allocations_.empty())
    spdlog::info("resource \"{}\": CDI: {} allocation spec(s) from before", options_.resource,
                 allocations_.size());
}

Status ResourceCdi::WriteIndexLocked() {
  const std::string dir = Dir();
  if (allocations_.empty()) return RemoveSpecFile(dir, AllocationIndexName(kind_));
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, a] : allocations_) j[name] = a.ids;
  return WriteSpecFile(dir, AllocationIndexName(kind_), j.dump() + "\n");
}

void ResourceCdi::DropAllocationsLocked(
    const std::function<bool(const std::string& name, const Allocation&)>& which,
    const std::string& why) {
  bool dropped = false;
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    if (!which(it->first, it->second)) {
      ++it;
      continue;
    }
    if (Status st = RemoveSpecFile(Dir(), AllocationFileName(kind_, it->first)); !st.ok()) {
      spdlog::warn("resource \"{}\": CDI: {}", options_.resource, st.message());
      ++it;
      continue;
    }
    spdlog::debug("resource \"{}\": CDI: removed the spec of {} ({}): {}", options_.resource,
                  it->first, StrJoin(it->second.ids, ","), why);
    it = allocations_.erase(it);
    dropped = true;
  }
  if (dropped) {
    if (Status st = WriteIndexLocked(); !st.ok())
      spdlog::warn("resource \"{}\": CDI: {}", options_.resource, st.message());
  }
}

void ResourceCdi::Released(const std::vector<std::string>& ids,
                           std::chrono::steady_clock::time_point listed) {
  if (options_.mode == CdiMode::kOff) return;
  const std::set<std::string> gone(ids.begin(), ids.end());
  MutexLock lock(mu_);
  if (!active_ || allocations_.empty()) return;
  DropAllocationsLocked(
      [&](const std::string&, const Allocation& a) {
        return a.written < listed && AnyIn(a.ids, gone);
      },
      "released");
}

size_t ResourceCdi::allocations() const {
  MutexLock lock(mu_);
  return allocations_.size();
}

void ResourceCdi::WriteLocked() {
  if (written_once_ && pending_.json == written_ && problem_.empty()) return;
  const std::string dir = UnderHostRoot(options_.host_root, options_.dir);
  const std::string name = file_name();
  // The file names fewer devices while it is being replaced: none may be
  // handed out by a name the runtime could fail to resolve.
  on_disk_.clear();
  const Status st =
      pending_.json.empty() ? RemoveSpecFile(dir, name) : WriteSpecFile(dir, name, pending_.json);
  if (!st.ok()) {
    if (problem_ != st.message())
      spdlog::error(
          "resource \"{}\": CDI spec: {}; Allocate gives no CDI names until it is written",
          options_.resource, st.message());
    problem_ = st.message();
    written_.clear();
    return;
  }
  if (!problem_.empty() || !written_once_)
    spdlog::info("resource \"{}\": CDI spec {}/{}: {} device(s) as {}", options_.resource,
                 options_.dir, name, pending_.devices.size(), kind_.str());
  problem_.clear();
  written_ = pending_.json;
  written_once_ = true;
  on_disk_.insert(pending_.devices.begin(), pending_.devices.end());
}

void ResourceCdi::Answer(const std::vector<std::string>& ids, const Recipe& recipe,
                         bool default_recipe, v1beta1::ContainerAllocateResponse* resp) {
  if (options_.mode == CdiMode::kOff) return;
  std::vector<std::string> names;
  bool all = true;
  if (default_recipe) {
    MutexLock lock(mu_);
    for (const std::string& id : ids) {
      if (on_disk_.count(id))
        names.push_back(QualifiedName(kind_, id));
      else
        all = false;
    }
  } else {
    nlohmann::json edits =
        Edits(recipe, [&](const std::string& p) { return LookUpNode(options_.host_root, p); });
    if (EditsEmpty(edits)) return;
    const std::string name = AllocationName(ids);
    const std::string content = RenderOne(kind_, name, std::move(edits));
    MutexLock lock(mu_);
    if (!active_) return;
    const std::set<std::string> mine(ids.begin(), ids.end());
    // The kubelet hands a device out again only after its pod left.
    DropAllocationsLocked([&](const std::string& other,
                              const Allocation& a) { return other != name && AnyIn(a.ids, mine); },
                          "handed out again");
    allocations_[name] = {ids, std::chrono::steady_clock::now()};
    // The index first: a spec on disk is always one a release can find.
    Status st = WriteIndexLocked();
    if (st.ok()) st = WriteSpecFile(Dir(), AllocationFileName(kind_, name), content);
    if (!st.ok()) {
      spdlog::error("resource \"{}\": CDI allocation spec for {}: {}; answered the classic way",
                    options_.resource, StrJoin(ids, ","), st.message());
      allocations_.erase(name);
      return;
    }
    names.push_back(QualifiedName(kind_, name));
  }
  if (names.empty()) return;
  if (CdiNames(options_.mode))
    for (const std::string& n : names) resp->add_cdi_devices()->set_name(n);
  if (CdiAnnotations(options_.mode))
    (*resp->mutable_annotations())[AnnotationKey(options_.resource)] = StrJoin(names, ",");
  // The spec carries every edit of these devices: the classic answer goes.
  if (options_.only && all) {
    resp->clear_devices();
    resp->clear_mounts();
    resp->clear_envs();
  }
}

size_t ResourceCdi::named() const {
  MutexLock lock(mu_);
  return on_disk_.size();
}

std::string ResourceCdi::problem() const {
  MutexLock lock(mu_);
  return problem_;
}

void RemoveStale(const std::string& host_root, const std::set<std::string>& dirs,
                 const std::vector<std::pair<std::string, Kind>>& keep) {
  for (const std::string& d : dirs) {
    const std::string dir = UnderHostRoot(host_root, d);
    for (const std::string& f : OwnedFiles(dir)) {
      if (std::any_of(keep.begin(), keep.end(),
                      [&](const auto& k) { return k.first == d && KindOwnsFile(k.second, f); }))
        continue;
      if (Status st = RemoveSpecFile(dir, f); !st.ok())
        spdlog::warn("CDI: {}", st.message());
      else
        spdlog::info("CDI: removed {}/{} (no resource writes it now)", d, f);
    }
  }
}

}  // namespace devplug::cdi
