#include "status.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "ops/control.h"

namespace devplug::ctl {
namespace {

using nlohmann::json;

constexpr char kDefaultConfig[] = "/etc/devplug/devplug.toml";
constexpr auto kTimeout = std::chrono::seconds(10);
constexpr size_t kWidth = 100;  // the text form fits this many columns

// Which control socket to ask: --socket, else the config file's
// control_socket, else the built-in default. An empty string (with *why set)
// when that cannot be known.
std::string SocketPath(const StatusOptions& o, std::string* why) {
  if (!o.socket.empty()) return o.socket;
  const std::string file = o.config.empty() ? kDefaultConfig : o.config;
  if (o.config.empty() && access(file.c_str(), F_OK) != 0)
    return config::AgentConfig{}.control_socket;
  config::LoadOptions lo;
  auto cfg = config::LoadFile(file, lo);
  if (!cfg.ok()) {
    *why =
        StrCat("cannot tell devplugd's control socket from ", file, ":\n", cfg.status().message());
    return "";
  }
  if (cfg->control_socket.empty()) {
    *why = StrCat(file, ": agent.control_socket is \"\": devplugd serves no control socket");
    return "";
  }
  return cfg->control_socket;
}

// Asks devplugd; the parsed answer, or nullopt (reason printed) for exit 2.
std::optional<json> Ask(const StatusOptions& o, const json& request,
                        std::chrono::milliseconds timeout = kTimeout) {
  std::string why;
  const std::string path = SocketPath(o, &why);
  if (path.empty()) {
    std::fprintf(stderr, "devplugctl: %s\n", why.c_str());
    return std::nullopt;
  }
  auto answer = ops::ControlRequest(path, request.dump(), timeout);
  if (!answer.ok()) {
    std::fprintf(stderr, "devplugctl: %s\n", answer.status().message().c_str());
    return std::nullopt;
  }
  json j = json::parse(*answer, nullptr, false);
  if (!j.is_object()) {
    std::fprintf(stderr, "devplugctl: devplugd at %s gave an answer that is not JSON\n",
                 path.c_str());
    return std::nullopt;
  }
  return j;
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Cuts `s` to `width` columns, marking the cut.
std::string Fit(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  if (width <= 3) return s.substr(0, width);
  return s.substr(0, width - 3) + "...";
}

// Prints `text` after `lead`, wrapped at spaces to fit the width; the
// lines after the first are indented by `indent` columns.
void Wrapped(const std::string& lead, const std::string& text, size_t indent) {
  std::string line = lead;
  size_t at = 0;
  while (at < text.size()) {
    const size_t room = kWidth > line.size() ? kWidth - line.size() : 1;
    size_t take = std::min(room, text.size() - at);
    if (at + take < text.size()) {  // break at the last space that fits
      const size_t space = text.rfind(' ', at + take);
      if (space != std::string::npos && space > at) take = space - at;
    }
    line += text.substr(at, take);
    std::printf("%s\n", line.c_str());
    at += take;
    while (at < text.size() && text[at] == ' ') ++at;
    line.assign(indent, ' ');
  }
  if (text.empty()) std::printf("%s\n", line.c_str());
}

void Row(const std::vector<std::pair<std::string, size_t>>& cells) {
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    const auto& [text, width] = cells[i];
    std::string cell = Fit(text, width);
    if (i + 1 < cells.size()) cell.resize(width, ' ');
    line += cell;
    if (i + 1 < cells.size()) line += ' ';
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  std::printf("%s\n", line.c_str());
}

// "2026-11-23T12:00:01Z" -> "2026-11-23 12:00:01"
std::string When(const std::string& iso) {
  std::string s = iso;
  if (s.size() == 20 && s[10] == 'T' && s[19] == 'Z') {
    s[10] = ' ';
    s.pop_back();
  }
  return s;
}

bool Fine(const json& r) {
  return r.value("registered", false) && r.value("devices_healthy", 0) > 0;
}

void PrintDevices(const json& r) {
  const json& devices = r.contains("devices") ? r["devices"] : json::array();
  if (devices.empty()) {
    std::printf("    (no devices)\n");
    return;
  }
  size_t id_w = 2;
  for (const json& d : devices) id_w = std::max(id_w, Str(d, "id").size());
  id_w = std::min<size_t>(id_w, 36);
  const bool tracking = r.value("release_tracking", false);
  const size_t holder_w = tracking ? 28 : 0;
  const size_t fixed = 4 + id_w + 1 + 9 + 1 + 4 + 1 + (tracking ? holder_w + 1 : 0);
  const size_t reason_w = kWidth > fixed + 10 ? kWidth - fixed : 10;
  auto row = [&](std::string id, std::string health, std::string numa, std::string holder,
                 std::string reason) {
    std::vector<std::pair<std::string, size_t>> cells = {
        {"   ", 3}, {id, id_w}, {health, 9}, {numa, 4}};
    if (tracking) cells.push_back({holder, holder_w});
    cells.push_back({reason, reason_w});
    Row(cells);
  };
  row("ID", "HEALTH", "NUMA", "HOLDER", "REASON");
  for (const json& d : devices) {
    std::string numa;
    if (d.contains("numa") && d["numa"].is_array())
      for (const json& n : d["numa"])
        numa += (numa.empty() ? "" : ",") + std::to_string(n.get<int>());
    std::string holder = "-";
    if (d.contains("holder") && d["holder"].is_object()) {
      const json& h = d["holder"];
      holder = StrCat(Str(h, "namespace"), "/", Str(h, "pod"), "/", Str(h, "container"));
    }
    const std::string state = Str(d, "release_state");
    if (!state.empty() && state != "allocated")
      holder = holder == "-" ? state : holder + " " + state;
    const std::string reason = Str(d, "reason");
    row(Str(d, "id"), Str(d, "health"), numa.empty() ? "-" : numa, holder,
        reason.empty() ? "-" : reason);
  }
}

}  // namespace

int PrintStatus(const StatusOptions& o) {
  if (o.ready) {
    const std::optional<json> answer = Ask(o, json{{"status", json::object()}});
    if (!answer || !answer->contains("agent")) {
      std::printf("not ready: devplugd does not answer (starting, stopped or hung)\n");
      return 1;
    }
    const json agent = answer->value("agent", json::object());
    // An agent older than "started" answers only once it has started.
    if (!agent.value("started", true)) {
      std::printf("not ready: devplugd %s is starting (creating its module instances)\n",
                  Str(agent, "version").c_str());
      return 1;
    }
    // Ready means serving: every resource whose module instance runs is
    // registered with the kubelet (a rolling update stops the old devplugd
    // only then). One left out (its module failed; retried in the
    // background) does not hold it back: a node without that hardware
    // would never be ready. (An agent without "running" is not waited on.)
    std::vector<std::string> waiting;
    if (answer->contains("resources") && (*answer)["resources"].is_array())
      for (const json& r : (*answer)["resources"])
        if (r.is_object() && r.value("running", false) && !r.value("registered", false))
          waiting.push_back(Str(r, "name") + " (" + Str(r, "state") + ")");
    if (!waiting.empty()) {
      std::string names;
      for (const std::string& w : waiting) names += (names.empty() ? "" : ", ") + w;
      std::printf("not ready: devplugd %s does not serve yet: %s\n", Str(agent, "version").c_str(),
                  names.c_str());
      return 1;
    }
    std::printf("ready: devplugd %s, %s\n", Str(agent, "version").c_str(),
                Str(agent, "status").c_str());
    return 0;
  }
  json request = {{"status", {{"devices", o.devices}}}};
  if (!o.resource.empty()) request["status"]["resource"] = o.resource;
  const std::optional<json> answer = Ask(o, request);
  if (!answer) return 2;
  if (answer->contains("error")) {
    std::fprintf(stderr, "devplugctl: devplugd says: %s\n", Str(*answer, "error").c_str());
    if (o.json) std::printf("%s\n", answer->dump(2).c_str());
    return 1;
  }
  if (!answer->contains("resources") || !(*answer)["resources"].is_array()) {
    std::fprintf(stderr, "devplugctl: devplugd's answer has no resource list\n");
    return 2;
  }
  const json& resources = (*answer)["resources"];
  const bool fine = std::all_of(resources.begin(), resources.end(), Fine);
  if (o.json) {
    std::printf("%s\n", answer->dump(2).c_str());
    return fine ? 0 : 1;
  }

  const json agent = answer->value("agent", json::object());
  std::printf("devplugd %s (module ABI %s), running since %s\n", Str(agent, "version").c_str(),
              Str(agent, "abi").c_str(), When(Str(agent, "since")).c_str());
  if (const std::string e = Str(agent, "reload_error"); !e.empty())
    Wrapped("reload failed (old configuration kept): ", e, 4);
  std::printf("\n");

  size_t name_w = 8;
  for (const json& r : resources) name_w = std::max(name_w, Str(r, "name").size());
  name_w = std::min<size_t>(name_w, 40);
  auto row = [&](std::string name, std::string module, std::string reg, std::string kubelet,
                 std::string healthy) {
    Row({{name, name_w}, {module, 18}, {reg, 19}, {kubelet, 7}, {healthy, 9}});
  };
  row("RESOURCE", "MODULE", "REGISTERED", "KUBELET", "HEALTHY");
  for (const json& r : resources) {
    std::string module = Str(r, "module");
    if (const std::string v = Str(r, "module_version"); !v.empty()) module += " " + v;
    const bool registered = r.value("registered", false);
    std::string since = registered ? When(Str(r, "registered_since")) : Str(r, "state");
    if (since.empty()) since = registered ? "yes" : "no";
    row(Str(r, "name"), module, since, r.value("kubelet_connected", false) ? "stream" : "-",
        StrCat(r.value("devices_healthy", 0), "/", r.value("devices_total", 0)));
    if (Str(r, "registration") == "plugin-watcher") {
      const json said = r.value("kubelet_status", json());
      std::string how = "plugin watcher, " + Str(r, "socket");
      if (said.is_object())
        how += said.value("registered", false)
                   ? " (the kubelet: registered)"
                   : " (the kubelet refused: " + Str(said, "error") + ")";
      Wrapped("    registration: ", how, 6);
    }
    if (const json c = r.value("cdi", json()); c.is_object()) {
      std::string cdi = StrCat(Str(c, "kind"), ", ", c.value("named", 0), " named in ",
                               Str(c, "spec"), " (", Str(c, "mode"), ")");
      // Under host_root the file is written elsewhere than the runtime reads.
      if (const std::string w = Str(c, "written_to"); !w.empty() && w != Str(c, "spec"))
        StrAppend(&cdi, ", written to ", w);
      if (const int a = c.value("allocations", 0); a > 0)
        StrAppend(&cdi, ", ", a, " allocation spec(s)");
      if (const std::string p = Str(c, "problem"); !p.empty()) StrAppend(&cdi, "; ", p);
      Wrapped("    CDI: ", cdi, 6);
    }
    if (const json d = r.value("dra", json()); d.is_object()) {
      std::string dra =
          StrCat("driver ", Str(d, "driver"), ", pool ", Str(d, "pool"), " (generation ",
                 d.value("generation", 0), "), claim specs in ", Str(d, "cdi_dir"));
      if (const std::string w = Str(d, "cdi_written_to"); !w.empty() && w != Str(d, "cdi_dir"))
        StrAppend(&dra, ", written to ", w);
      if (const std::string e = Str(d, "slice_error"); !e.empty())
        StrAppend(&dra, "; ResourceSlices: ", e);
      if (d.value("draining", false))
        dra = StrCat("driver ", Str(d, "driver"),
                     " draining: no slices; it stays for the unprepare of the claims prepared "
                     "before the move to the device plugin API");
      Wrapped("    DRA: ", dra, 6);
      if (const json w = d.value("withheld", json::array()); w.is_array() && !w.empty()) {
        std::vector<std::string> held;
        for (const json& x : w) held.push_back(x.is_string() ? x.get<std::string>() : x.dump());
        Wrapped("    withheld (held through the device plugin API): ", StrJoin(held, ", "), 6);
      }
      for (const json& c : d.value("prepared", json::array())) {
        std::vector<std::string> ids;
        for (const json& dev : c.value("devices", json::array())) ids.push_back(Str(dev, "id"));
        Wrapped("    prepared: ",
                StrCat(Str(c, "namespace"), "/", Str(c, "name"), " (", Str(c, "uid"),
                       "): ", StrJoin(ids, ",")),
                6);
      }
    }
    if (const std::string e = Str(r, "last_error"); !e.empty()) Wrapped("    last error: ", e, 6);
    if (r.contains("devices")) PrintDevices(r);
  }
  if (resources.empty()) std::printf("(no resources)\n");
  return fine ? 0 : 1;
}

int StatusExitCode(const StatusOptions& o) {
  std::string why;
  const std::string path = SocketPath(o, &why);
  if (path.empty()) return 2;
  json request = {{"status", json::object()}};
  if (!o.resource.empty()) request["status"]["resource"] = o.resource;
  auto answer = ops::ControlRequest(path, request.dump(), kTimeout);
  if (!answer.ok()) return 2;
  const json j = json::parse(*answer, nullptr, false);
  if (!j.is_object()) return 2;
  if (j.contains("error")) return 1;
  if (!j.contains("resources") || !j["resources"].is_array()) return 2;
  return std::all_of(j["resources"].begin(), j["resources"].end(), Fine) ? 0 : 1;
}

int PrintMetrics(const StatusOptions& o) {
  const std::optional<json> answer = Ask(o, json{{"metrics", json::object()}});
  if (!answer) return 2;
  if (!answer->contains("metrics") || !(*answer)["metrics"].is_string()) {
    std::fprintf(stderr, "devplugctl: devplugd sent no metrics\n");
    return 2;
  }
  std::fputs((*answer)["metrics"].get<std::string>().c_str(), stdout);
  return 0;
}

int Handover(const StatusOptions& o) {
  const std::optional<json> answer =
      Ask(o, json{{"handover", json::object()}},
          ops::AnswerTimeout(ops::ControlQuery::Kind::kHandover) + std::chrono::seconds(5));
  if (!answer) return 2;
  if (o.json) std::printf("%s\n", answer->dump(2).c_str());
  if (answer->contains("error")) {
    const std::string error = Str(*answer, "error");
    // One that predates handovers knows no such request.
    if (error.starts_with("unknown request")) {
      std::fprintf(stderr, "devplugctl: the running devplugd cannot hand over (too old): %s\n",
                   error.c_str());
      return 2;
    }
    std::fprintf(stderr, "devplugctl: %s\n", error.c_str());
    return 1;
  }
  const json h = answer->value("handover", json::object());
  if (!h.contains("pid")) {
    std::fprintf(stderr, "devplugctl: devplugd's answer names no new process\n");
    return 2;
  }
  if (!o.json)
    std::printf(
        "handed over: devplugd %s (pid %lld) serves in place of pid %lld, after %lld ms%s\n",
        Str(h, "version").c_str(), h.value("pid", 0LL), h.value("previous_pid", 0LL),
        h.value("ms", 0LL),
        h.value("systemd_main_pid", false) ? "; it is systemd's main process now" : "");
  return 0;
}

}  // namespace devplug::ctl
