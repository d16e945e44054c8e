#include "config/parser.h"
#include "model/cdi_names.h"

namespace devplug::config::detail {

void Parser::ParseResource(const toml::table& t) {
  ResourceConfig r;
  r.where = {file_, LineOf(t)};
  const size_t index = cfg_.resources.size();
  auto key_of = [&](std::string_view k) { return ResourceKey(index, k); };
  bool has_name = false, has_module = false;
  for (auto&& [k, node] : t) {
    const std::string_view name = k.str();
    if (name == "name") {
      if (const std::string* s = String(node, key_of(name))) {
        r.name = *s;
        has_name = true;
        if (std::string why = CheckResourceName(*s); !why.empty()) {
          Error(node, key_of(name),
                StrCat("\"", *s, "\" is not a valid extended resource name: ", why));
        }
      }
    } else if (name == "module") {
      if (const std::string* s = String(node, key_of(name))) {
        r.module = *s;
        has_module = true;
        if (s->empty() || (s->front() != '/' && s->find('/') != std::string::npos)) {
          Error(node, key_of(name),
                StrCat("\"", *s, "\" must be a bare module name or an absolute path to a .so"));
        }
      }
    } else if (name == "socket") {
      if (const std::string* s = String(node, key_of(name))) {
        r.socket = *s;
        socket_lines_[index] = LineOf(node);
      }
    } else if (name == "registration") {
      if (const std::string* s = String(node, key_of(name))) {
        if (ParseRegistrationMode(*s, &r.registration))
          registration_set_.insert(index);
        else
          Error(node, key_of(name),
                StrCat("unknown mode \"", *s, "\" (expected kubelet|plugin-watcher)"));
      }
    } else if (name == "api") {
      if (const std::string* s = String(node, key_of(name))) {
        if (*s == "node-label") {
          r.api_from_node_label = true;
          key_lines_[{index, "api"}] = LineOf(node);
        } else if (ParseServingApi(*s, &r.api)) {
          key_lines_[{index, "api"}] = LineOf(node);
        } else {
          Error(node, key_of(name),
                StrCat("unknown API \"", *s, "\" (expected device-plugin|dra|node-label)"));
        }
      }
    } else if (name == "dra_driver") {
      if (const std::string* s = String(node, key_of(name))) {
        r.driver = *s;
        key_lines_[{index, "dra_driver"}] = LineOf(node);
        if (std::string why = CheckDriverName(*s); !why.empty())
          Error(node, key_of(name), StrCat("\"", *s, "\" is not a DRA driver name: ", why));
      }
    } else if (name == "dra_taint_effect") {
      if (const std::string* s = String(node, key_of(name))) {
        r.taint_effect = *s;
        key_lines_[{index, "dra_taint_effect"}] = LineOf(node);
        if (*s != "NoSchedule" && *s != "NoExecute" && *s != "None")
          Error(node, key_of(name),
                StrCat("unknown effect \"", *s, "\" (expected NoSchedule|NoExecute|None)"));
      }
    } else if (name == "required" || name == "cdi_only") {
      if (const auto* b = node.as_boolean())
        (name == "required" ? r.required : r.cdi_only) = b->get();
      else
        Error(node, key_of(name), StrCat("must be a boolean, not ", TypeName(node)));
      if (name == "cdi_only") key_lines_[{index, "cdi_only"}] = LineOf(node);
      if (name == "required") key_lines_[{index, "required"}] = LineOf(node);
    } else if (name == "cdi" && node.is_string()) {
      // A string: devplugd's. Anything else stays the module's own key (the
      // nvidia module's boolean `cdi`).
      if (const std::string* s = String(node, key_of(name))) {
        if (ParseCdiMode(*s, &r.cdi)) {
          key_lines_[{index, "cdi"}] = LineOf(node);
        } else {
          Error(node, key_of(name),
                StrCat("unknown mode \"", *s, "\" (expected off|cri|annotations|both)"));
        }
      }
    } else if (name == "cdi_dir") {
      if (const std::string* s = String(node, key_of(name))) {
        if (std::string why = SetPath(*s, &r.cdi_dir); !why.empty()) Error(node, key_of(name), why);
      }
    } else {
      ModuleValue mv;
      mv.where = {file_, LineOf(node)};
      mv.tree = std::make_shared<const ConfigNode>(TreeOf(node));
      if (const auto* s = node.as_string())
        mv.value = s->get();
      else if (const auto* i = node.as_integer())
        mv.value = i->get();
      else if (const auto* b = node.as_boolean())
        mv.value = b->get();
      else if (const auto* f = node.as_floating_point())
        mv.value = f->get();
      else if (const auto* a = node.as_array()) {
        std::vector<std::string> v;
        std::vector<int64_t> ints;
        for (const toml::node& el : *a) {
          if (const auto* s = el.as_string())
            v.push_back(s->get());
          else
            mv.array_of_non_strings = true;
          if (const auto* i = el.as_integer()) ints.push_back(i->get());
        }
        if (!a->empty() && ints.size() == a->size())
          mv.value = std::move(ints);
        else
          mv.value = std::move(v);
      } else if (node.is_table()) {
        mv.value = std::monostate{};
      } else {
        Error(node, key_of(name), StrCat("unsupported value type: ", TypeName(node)));
        continue;
      }
      r.module_keys.emplace(std::string(name), std::move(mv));
    }
  }
  if (!has_name) {
    Error(t, key_of("name"), "missing (every [[resource]] needs an extended resource name)");
  }
  if (!has_module) {
    Error(t, key_of("module"), "missing (every [[resource]] names the module that serves it)");
  }
  cfg_.resources.push_back(std::move(r));
}

}  // namespace devplug::config::detail
