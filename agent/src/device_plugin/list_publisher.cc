#include "device_plugin/list_publisher.h"

#include "model/kubelet_limits.h"

namespace devplug::device_plugin {

std::string ListPublisher::Accept(const DeviceList& list) {
  accepted_ = MakeSnapshot(list);
  const size_t bytes = accepted_->ByteSizeLong();
  if (bytes <= kubelet::kKubeletMaxMessageBytes) return "";
  accepted_.reset();
  return StrCat(list.size(), " devices make a ", bytes,
                " byte device list, over the kubelet's 4 MiB message limit; not sending it");
}

void ListPublisher::Publish(const DeviceListPtr& list) {
  if (cdi_) cdi_->Publish(*list);
  // The message built for the check is the one sent.
  hub_->Publish(accepted_ ? std::move(accepted_) : MakeSnapshot(*list));
}

}  // namespace devplug::device_plugin
