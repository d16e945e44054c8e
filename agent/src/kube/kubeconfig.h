// A kubeconfig file (kubectl's format, a node's /etc/kubernetes/kubelet.conf)
// read into Credentials: its current context's cluster (server, CA as a
// file or as certificate-authority-data) and user (a token or token file,
// or a client certificate and key, as files or *-data). Relative paths are
// taken from the kubeconfig's own folder, as kubectl does. Credential
// plugins (exec, auth-provider), passwords and insecure-skip-tls-verify are
// refused with a reason: devplugd runs unattended on every node.
//
// Pure functions over the file's text; thread-safe.
#pragma once

#include <string>

#include "config/config.h"
#include "kube/client.h"
#include "util/status.h"

namespace devplug::kube {

// `text` is the file's content, `path` its name (for messages and relative
// paths). INVALID_ARGUMENT, naming the file and the field, when it cannot
// be used.
StatusOr<Credentials> ParseKubeconfig(const std::string& text, const std::string& path);
StatusOr<Credentials> LoadKubeconfig(const std::string& path);

// Where devplugd finds the API server, the first that applies: the
// kubeconfig file `kubeconfig`; the pod's service account (InCluster) when
// `given.server` is empty; else `given`.
StatusOr<Credentials> ChooseCredentials(const std::string& kubeconfig, Credentials given);
// The same, from the [agent] keys (api_kubeconfig, api_server and its files).
StatusOr<Credentials> ChooseCredentials(const config::AgentConfig& cfg);

}  // namespace devplug::kube
