// How a resource makes itself known to the kubelet: set by the
// configuration, used by the registrar, shown by the status.
#pragma once

namespace devplug {

// kKubelet: serve in the device-plugins folder and call Register on
// kubelet.sock (every kubelet since 1.8). kPluginWatcher: serve the
// Registration and DevicePlugin services on one socket in plugins_registry
// and let the kubelet's plugin watcher find it (every kubelet since 1.12).
enum class RegistrationMode { kKubelet, kPluginWatcher };

}  // namespace devplug
