// The device plugin API's side of a resource's device lists (the instance's
// ListSink): each list the instance accepts becomes the ListAndWatch message,
// built once and checked against the kubelet's 4 MiB receive limit (the
// kubelet drops a stream whose message exceeds it and never reconnects, so
// such a list is held back and the previous one stays). The resource's CDI
// spec is rewritten before the kubelet's streams get the list, so that the
// kubelet never holds a device the spec lacks.
//
// Thread safety: Accept and Publish are called by the instance, one list at
// a time, under its publication lock (its worker, or Republish's caller).
#pragma once

#include <memory>
#include <string>

#include "cdi/resource_cdi.h"
#include "device_plugin/stream_hub.h"
#include "modules/hooks.h"

namespace devplug::device_plugin {

class ListPublisher final : public modules::ListSink {
 public:
  // `hub` outlives the instance that publishes through this; `cdi` may be
  // null (cdi is "off").
  ListPublisher(StreamHub* hub, std::shared_ptr<cdi::ResourceCdi> cdi)
      : hub_(hub), cdi_(std::move(cdi)) {}

  std::string Accept(const DeviceList& list) override;
  void Publish(const DeviceListPtr& list) override;

 private:
  StreamHub* const hub_;
  const std::shared_ptr<cdi::ResourceCdi> cdi_;
  SnapshotPtr accepted_;  // the message Accept built for the list it passed
};

}  // namespace devplug::device_plugin
