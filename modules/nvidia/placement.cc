#include "placement.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include "nvml.h"

namespace devplug::nvidia {

std::vector<std::string> PreferByParent(const Ids& available, const Ids& must_include, size_t size,
                                        const std::function<Place(std::string_view)>& place_of) {
  struct Group {
    std::vector<std::string_view> ids;  // sorted
    int numa = -1;
    bool used = false;
  };
  std::map<std::string_view, Group> groups;  // by parent UUID
  std::set<int> numas;
  std::vector<std::string> out;
  std::set<std::string_view> taken;
  std::map<std::string_view, Place> places;  // keeps each parent's name alive
  auto parent_of = [&](std::string_view id) -> std::pair<std::string_view, int> {
    auto [it, fresh] = places.try_emplace(id);
    if (fresh) it->second = place_of(id);
    return {it->second.parent, it->second.numa_node};
  };
  for (std::string_view id : must_include) {
    if (!taken.insert(id).second) continue;
    out.emplace_back(id);
    auto [parent, numa] = parent_of(id);
    Group& g = groups[parent];
    g.used = true;
    g.numa = numa;
    numas.insert(numa);
  }
  for (std::string_view id : available) {
    if (!taken.insert(id).second) continue;
    auto [parent, numa] = parent_of(id);
    Group& g = groups[parent];
    g.numa = numa;
    g.ids.push_back(id);
  }
  for (auto& [p, g] : groups) std::sort(g.ids.begin(), g.ids.end());
  while (out.size() < size) {
    const size_t want = size - out.size();
    Group* best = nullptr;
    auto better = [&](const Group& a, const Group& b) {  // a before b?
      if (a.used != b.used) return a.used;
      const bool fa = a.ids.size() >= want, fb = b.ids.size() >= want;
      if (fa != fb) return fa;
      if (a.ids.size() != b.ids.size())
        return fa ? a.ids.size() < b.ids.size() : a.ids.size() > b.ids.size();
      const bool na = numas.count(a.numa) > 0, nb = numas.count(b.numa) > 0;
      if (na != nb) return na;
      return a.numa < b.numa;
    };
    for (auto& [p, g] : groups)  // in UUID order: the first of equals wins
      if (!g.ids.empty() && (!best || better(g, *best))) best = &g;
    if (!best) break;
    const size_t n = std::min(want, best->ids.size());
    for (size_t i = 0; i < n; i++) out.emplace_back(best->ids[i]);
    best->ids.erase(best->ids.begin(), best->ids.begin() + static_cast<std::ptrdiff_t>(n));
    best->used = true;
    numas.insert(best->numa);
  }
  return out;
}

std::vector<std::string> PreferByTopology(const Inventory& inv, const Ids& available,
                                          const Ids& must_include, size_t size) {
  std::map<std::string_view, size_t> index;
  for (size_t i = 0; i < inv.topo_ids.size(); i++) index[inv.topo_ids[i]] = i;
  auto score = [&](size_t a, size_t b) {
    return 1000L * inv.links[a][b] + (nvml::kTopologySystem + 10 - inv.levels[a][b]);
  };
  std::vector<std::string> out;
  std::vector<size_t> chosen;
  std::set<std::string_view> taken;
  for (std::string_view id : must_include) {
    if (!taken.insert(id).second) continue;
    out.emplace_back(id);
    if (auto it = index.find(id); it != index.end()) chosen.push_back(it->second);
  }
  std::vector<std::pair<std::string_view, size_t>> cands;  // sorted by ID
  for (std::string_view id : available) {
    if (taken.count(id)) continue;
    auto it = index.find(id);
    cands.emplace_back(id, it == index.end() ? SIZE_MAX : it->second);
    taken.insert(id);
  }
  std::sort(cands.begin(), cands.end());
  if (out.size() >= size || cands.empty()) return out;
  const size_t k = std::min(size - out.size(), cands.size());
  auto pair_score = [&](size_t a, size_t b) {
    return (a == SIZE_MAX || b == SIZE_MAX) ? 0L : score(a, b);
  };
  // Exhaustive when C(n, k) is small.
  double combos = 1;
  for (size_t i = 0; i < k; i++)
    combos = combos * static_cast<double>(cands.size() - i) / static_cast<double>(i + 1);
  std::vector<size_t> best;
  if (combos <= 50000) {
    std::vector<size_t> pick(k);
    for (size_t i = 0; i < k; i++) pick[i] = i;
    long best_score = -1;
    for (;;) {
      long s = 0;
      for (size_t a = 0; a < k; a++) {
        for (size_t c : chosen) s += pair_score(cands[pick[a]].second, c);
        for (size_t b = a + 1; b < k; b++)
          s += pair_score(cands[pick[a]].second, cands[pick[b]].second);
      }
      if (s > best_score) {
        best_score = s;
        best = pick;
      }
      // Next combination in lexicographic order.
      size_t i = k;
      while (i > 0 && pick[i - 1] == cands.size() - k + i - 1) i--;
      if (i == 0) break;
      pick[i - 1]++;
      for (size_t j = i; j < k; j++) pick[j] = pick[j - 1] + 1;
    }
  } else {
    std::vector<bool> used(cands.size(), false);
    std::vector<size_t> members = chosen;
    for (size_t step = 0; step < k; step++) {
      long best_gain = -1;
      size_t best_i = 0;
      for (size_t i = 0; i < cands.size(); i++) {
        if (used[i]) continue;
        long gain = 0;
        for (size_t m : members) gain += pair_score(cands[i].second, m);
        if (gain > best_gain) {
          best_gain = gain;
          best_i = i;
        }
      }
      used[best_i] = true;
      best.push_back(best_i);
      members.push_back(cands[best_i].second);
    }
  }
  for (size_t i : best) out.emplace_back(cands[i].first);
  return out;
}

}  // namespace devplug::nvidia
