// The claims a DRA resource has prepared on this node, kept in a file so
// that a restarted devplugd knows them: it answers a repeated
// NodePrepareResources with the same devices, unprepares (scrubs) what was
// prepared before it stopped, and rebuilds the CDI specs a reboot took
// from tmpfs.
//
// The file is JSON with a checksum of its claims; it is replaced whole
// (written beside, flushed, renamed), so a crash leaves the old file or
// the new one, never half of one. A file that does not parse, or whose
// checksum does not match, is an error naming the file: devplugd must not
// forget claims it prepared without saying so.
//
// Thread safety: not thread-safe; one owner.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/status.h"

namespace devplug::dra {

struct PreparedDevice {
  std::string request;  // the claim's request it answers
  std::string pool;
  std::string device;  // the DRA device name
  std::string id;      // the module's device ID
  std::vector<std::string> cdi_ids;
  // The share of a shared device the claim holds ("": an unshared device);
  // a share that consumes several of the device's shares is one entry per
  // module device, all with the same share_id.
  std::string share_id;
  // The network interface the module says the device gives the container
  // (ABI 1.11; "" both: none), for the claim's status.
  std::string interface_name, hardware_address;
  bool operator==(const PreparedDevice&) const = default;
};

struct PreparedClaim {
  std::string uid, ns, name;
  std::vector<PreparedDevice> devices;
  // The claim's CDI spec file: its name and content, written again at
  // start when a reboot emptied the (tmpfs) spec folder ("": none).
  std::string spec_file, spec;
  // Its device metadata files (KEP-5304): the path under the spec folder
  // and the content, written again with the spec.
  std::map<std::string, std::string> metadata;
  bool operator==(const PreparedClaim&) const = default;
};

class Checkpoint {
 public:
  // The checkpoint at `path`; empty when the file does not exist. With
  // `node`, a claim of another node's pool (a state folder two nodes share
  // by mistake) is not this node's to act on: it is logged, left out of
  // claims(), and written back unchanged by Save.
  static StatusOr<Checkpoint> Load(const std::string& path, const std::string& node = "");

  // Writes every claim to the file, replacing it whole.
  Status Save() const;

  // Whether the file is another than the one this read or wrote last:
  // another devplugd serving the node beside this one (a rolling update)
  // wrote it. Load it again then, under the lock they share.
  bool ChangedOnDisk() const;

  const std::string& path() const { return path_; }
  const std::map<std::string, PreparedClaim>& claims() const { return claims_; }  // by UID
  const PreparedClaim* Find(const std::string& uid) const;
  void Put(PreparedClaim claim);
  // False when it was not there.
  bool Remove(const std::string& uid);

 private:
  explicit Checkpoint(std::string path) : path_(std::move(path)) {}
  std::string path_;
  std::map<std::string, PreparedClaim> claims_;
  std::vector<PreparedClaim> foreign_;  // other nodes' claims, kept as they were
  // The file as last read or written: device, inode, size, mtime (ns); all
  // 0 for none. Every write replaces the file, so another inode is another
  // writer's file.
  struct Version {
    uint64_t dev = 0, ino = 0;
    int64_t size = 0, mtime_ns = 0;
    bool operator==(const Version&) const = default;
  };
  static Version VersionOf(const std::string& path);
  mutable Version version_;
};

}  // namespace devplug::dra
