#include "resource_set.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace devplug {

ResourceSet::~ResourceSet() {
  // Shutdown waited already; a thread still running owns its resource.
  for (Retiring& t : retiring_)
    if (t.thread.joinable()) t.thread.detach();
}

Resource* ResourceSet::ById(uint64_t id) const {
  for (const auto& r : list_)
    if (r->id() == id) return r.get();
  return nullptr;
}

const Resource* ResourceSet::ByName(const std::string& name) const {
  for (const auto& r : list_)
    if (r->cfg().name == name) return r.get();
  return nullptr;
}

std::unique_ptr<Resource> ResourceSet::Take(List& list, const std::string& name) {
  auto it = std::find_if(list.begin(), list.end(),
                         [&](const auto& r) { return r && r->cfg().name == name; });
  if (it == list.end()) return nullptr;
  std::unique_ptr<Resource> r = std::move(*it);
  list.erase(it);
  return r;
}

void ResourceSet::Retire(std::unique_ptr<Resource> r, Clock::time_point deadline) {
  r->RequestStop();
  std::erase_if(retiring_, [](Retiring& t) {
    if (!t.done->load()) return false;
    t.thread.join();
    return true;
  });
  auto done = std::make_shared<std::atomic<bool>>(false);
  retiring_.push_back({std::thread([r = std::move(r), deadline, done]() mutable {
                         if (!r->StopModule(deadline)) {
                           spdlog::error("resource \"{}\": module did not stop; abandoning it",
                                         r->cfg().name);
                           (void)r.release();
                         }
                         r.reset();
                         done->store(true);
                       }),
                       done});
}

void ResourceSet::WaitRetired(Clock::time_point deadline) {
  for (Retiring& t : retiring_) {
    while (!t.done->load() && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (t.done->load())
      t.thread.join();
    else
      t.thread.detach();
  }
  retiring_.clear();
}

}  // namespace devplug
