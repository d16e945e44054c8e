#include "devplug/common/preferred.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

namespace devplug::common {
namespace {

struct Bucket {
  int key = -1;                           // NUMA node or group
  std::vector<const Placement*> members;  // sorted by ID
  size_t used = 0;                        // members (or must_include) already chosen
};

// The ranking of buckets when `need` more devices are wanted; smaller is
// better. Buckets already used (by must_include) come first.
//  - NUMA nodes (`is_node`): a node that can hold the whole remainder beats
//    one that cannot; among those that can, the smallest (least left over);
//    among those that cannot, the largest (fewest nodes spanned).
//  - Groups inside a node: a group that can be taken whole (no larger than
//    the remainder) beats one that would be split; among whole ones the
//    largest, among split ones the smallest.
// A bucket without a key (-1) loses ties; then the key, then the first ID.
auto RankKey(const Bucket& x, size_t need, bool is_node) {
  const size_t n = x.members.size();
  const bool preferred = is_node ? n >= need : n <= need;
  const long size = static_cast<long>(n);
  const long order = is_node ? (preferred ? size : -size) : (preferred ? -size : size);
  return std::make_tuple(-static_cast<long>(x.used), preferred ? 0 : 1, order, x.key < 0 ? 1 : 0,
                         x.key, std::string_view(x.members.front()->id));
}

// Removes and returns the best bucket for `need` more devices. Re-ranking
// before every pick matters: what "fits" changes as the remainder shrinks.
// Each pick yields at least one device, so a request costs
// O(need x buckets).
Bucket TakeBest(std::vector<Bucket>& buckets, size_t need, bool is_node) {
  auto best = std::min_element(buckets.begin(), buckets.end(),
                               [need, is_node](const Bucket& a, const Bucket& b) {
                                 return RankKey(a, need, is_node) < RankKey(b, need, is_node);
                               });
  Bucket b = std::move(*best);
  *best = std::move(buckets.back());
  buckets.pop_back();
  return b;
}

}  // namespace

std::vector<std::string> PackByLocality(const std::vector<Placement>& available,
                                        const std::vector<std::string>& must_include, size_t size) {
  std::vector<std::string> out;
  std::set<std::string_view> chosen;
  std::map<std::string_view, const Placement*> by_id;
  for (const Placement& p : available) by_id.emplace(p.id, &p);
  std::map<int, size_t> must_per_node, must_per_group;
  for (const std::string& id : must_include) {
    if (!chosen.insert(id).second) continue;
    out.push_back(id);
    if (auto it = by_id.find(id); it != by_id.end()) {
      must_per_node[it->second->numa_node]++;
      if (it->second->group >= 0) must_per_group[it->second->group]++;
    }
  }
  if (out.size() >= size) return out;

  // Candidates by NUMA node, each sorted by ID.
  std::map<int, Bucket> nodes;
  for (const auto& [id, p] : by_id) {
    if (chosen.count(id)) continue;
    Bucket& b = nodes[p->numa_node];
    b.key = p->numa_node;
    b.members.push_back(p);
  }
  std::vector<Bucket> ranked;
  for (auto& [key, b] : nodes) {
    b.used = must_per_node.count(key) ? must_per_node[key] : 0;
    ranked.push_back(std::move(b));
  }
  size_t need = size - out.size();
  while (need > 0 && !ranked.empty()) {
    const Bucket node = TakeBest(ranked, need, /*is_node=*/true);
    // Split the node's candidates into groups; devices without a group are
    // groups of one.
    std::map<int, Bucket> groups;
    std::vector<Bucket> singles;
    for (const Placement* p : node.members) {
      if (p->group < 0) {
        Bucket s;
        s.key = -1;
        s.members.push_back(p);
        singles.push_back(std::move(s));
        continue;
      }
      Bucket& g = groups[p->group];
      g.key = p->group;
      g.members.push_back(p);
    }
    std::vector<Bucket> order;
    for (auto& [key, g] : groups) {
      g.used = must_per_group.count(key) ? must_per_group[key] : 0;
      order.push_back(std::move(g));
    }
    for (Bucket& s : singles) order.push_back(std::move(s));
    while (need > 0 && !order.empty()) {
      const Bucket g = TakeBest(order, need, /*is_node=*/false);
      for (const Placement* p : g.members) {
        if (need == 0) break;
        out.push_back(p->id);
        need--;
      }
    }
  }
  return out;
}

std::vector<std::string> PackByNuma(const std::vector<std::string_view>& available,
                                    const std::vector<std::string_view>& must_include, size_t size,
                                    const std::function<int(std::string_view)>& numa_of) {
  std::vector<Placement> places;
  places.reserve(available.size());
  for (std::string_view id : available) places.push_back({std::string(id), numa_of(id), -1});
  return PackByLocality(places, std::vector<std::string>(must_include.begin(), must_include.end()),
                        size);
}

}  // namespace devplug::common
