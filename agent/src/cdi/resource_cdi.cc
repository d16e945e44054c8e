#include "cdi/resource_cdi.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <map>

#include <spdlog/spdlog.h>

#include "cdi/spec_dir.h"

namespace devplug::cdi {
namespace {

std::string Under(const std::string& host_root, const std::string& path) {
  if (host_root.empty() || host_root == "/") return path;
  return host_root + path;
}

}  // namespace

std::optional<NodeInfo> LookUpNode(const std::string& host_root, const std::string& host_path) {
  struct stat st {};
  // The host's symlinks (/dev/serial/by-id/...) point at host paths: an
  // absolute target is taken under host_root again.
  std::string path = host_path;
  for (int hop = 0; hop < 8; ++hop) {
    const std::string at = Under(host_root, path);
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
  r->active_ = r->options_.active;
  return r;
}

void ResourceCdi::Publish(const modules::DeviceList& list) {
  if (options_.mode == CdiMode::kOff) return;
  // Shared devices (shares = 110) name one node 110 times: look it up once.
  std::map<std::string, std::optional<NodeInfo>> seen;
  Rendered next = Render(kind_, list, [&](const std::string& p) {
    auto [it, fresh] = seen.try_emplace(p);
    if (fresh) it->second = LookUpNode(options_.host_root, p);
    return it->second;
  });
  std::lock_guard lock(mu_);
  for (const auto& [id, why] : next.skipped) {
    if (skip_told_.insert(id).second)
      spdlog::info(
          "resource \"{}\": device {} has no CDI name ({}); Allocate gives it the classic way",
          options_.resource, id, why);
  }
  pending_ = std::move(next);
  if (active_) WriteLocked();
}

void ResourceCdi::Activate() {
  std::lock_guard lock(mu_);
  active_ = true;
  WriteLocked();
}

void ResourceCdi::WriteLocked() {
  if (written_once_ && pending_.json == written_ && problem_.empty()) return;
  const std::string dir = Under(options_.host_root, options_.dir);
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

void ResourceCdi::Answer(const std::vector<std::string>& ids, bool default_recipe,
                         v1beta1::ContainerAllocateResponse* resp) const {
  if (options_.mode == CdiMode::kOff) return;
  std::vector<std::string> names;
  bool all = true;
  {
    std::lock_guard lock(mu_);
    for (const std::string& id : ids) {
      if (on_disk_.count(id))
        names.push_back(QualifiedName(kind_, id));
      else
        all = false;
    }
  }
  if (names.empty()) return;
  if (CdiNames(options_.mode))
    for (const std::string& n : names) resp->add_cdi_devices()->set_name(n);
  if (CdiAnnotations(options_.mode))
    (*resp->mutable_annotations())[AnnotationKey(options_.resource)] = StrJoin(names, ",");
  // The spec carries every edit of these devices: the classic answer goes.
  if (options_.only && all && default_recipe) {
    resp->clear_devices();
    resp->clear_mounts();
    resp->clear_envs();
  }
}

size_t ResourceCdi::named() const {
  std::lock_guard lock(mu_);
  return on_disk_.size();
}

std::string ResourceCdi::problem() const {
  std::lock_guard lock(mu_);
  return problem_;
}

void RemoveStale(const std::string& host_root, const std::set<std::string>& dirs,
                 const std::set<std::string>& keep) {
  for (const std::string& d : dirs) {
    const std::string dir = Under(host_root, d);
    for (const std::string& f : OwnedFiles(dir)) {
      if (keep.count(d + "/" + f)) continue;
      if (Status st = RemoveSpecFile(dir, f); !st.ok())
        spdlog::warn("CDI: {}", st.message());
      else
        spdlog::info("CDI: removed {}/{} (no resource writes it now)", d, f);
    }
  }
}

}  // namespace devplug::cdi
