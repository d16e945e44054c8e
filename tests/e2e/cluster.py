"""A real Kubernetes cluster on this machine, for scripts/cluster and
scripts/e2e-cluster: etcd, the API server (its own CA and service-account
keys), the controller manager and the scheduler, and one or two nodes, each
a kubelet with its own containerd 2 and a CNI bridge from Debian's
containernetworking-plugins. The programs come from scripts/build-cluster.

Everything runs as root under WORK and is found again by the paths on its
command line, so `down` cleans up after a run that was killed as well.

Addresses: the control plane and node 1 use the host's network namespace and
a bridge, BRIDGE (10.210.0.1/24), made for the run; node 2 lives in its own
network namespace (10.210.0.2 on a veth into the bridge). Pods get
10.211.N.0/24 on node N. Each node has its own mount namespace, where its
own folders are bound over /var/lib/kubelet and /var/log/pods: the kubelet
serves device plugins on the fixed path /var/lib/kubelet/device-plugins
whatever --root-dir says (pkg/kubelet/cm/devicemanager: NewManagerImpl takes
pluginapi.KubeletSocket), and writes container logs to /var/log/pods, so two
kubelets need two mount namespaces; the host's /var/lib/kubelet is never
touched. Each node's pods live under its own cgroup parent (/devplug-nodeN)."""
import glob
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import time

from node import Failure, check, kill, mounts_under, pids_of, run, say, wait_for

WORK = "/var/tmp/devplug-cluster"
RUN = "/run/devplug-cluster"
PKI = WORK + "/pki"
BRIDGE = "devplug-k8s0"
API_IP = "10.210.0.1"
API = f"https://{API_IP}:6443"
ETCD = "http://127.0.0.1:23790"
KUBELET_ROOT = "/var/lib/kubelet"
DEVPLUG_STATE = "/var/lib/devplug"
SERVICE_CIDR = "10.212.0.0/24"
NODE_STATUS_PERIOD = "10s"  # the kubelet's default nodeStatusUpdateFrequency
PAUSE_IMAGE = "localhost/devplug-e2e-pause:1"


def node_name(i):
    return f"devplug-node{i}"


def netns(i):
    """Node 1 uses the host's network namespace, node 2 its own."""
    return None if i == 1 else f"devplug-node{i}"


def node_ip(i):
    return f"10.210.0.{i}"


def quiet(*cmd):
    """stdout of cmd; its stderr only where it fails (ctr warns on every call
    that cgroup v1 is deprecated)."""
    r = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise Failure(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


# ---- certificates ------------------------------------------------------------------------


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def make_cert(name, subject, sans=None, server=False):
    """A key and certificate under PKI, signed by the cluster's CA."""
    key, csr, crt = f"{PKI}/{name}.key", f"{PKI}/{name}.csr", f"{PKI}/{name}.crt"
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key)
    openssl("req", "-new", "-key", key, "-subj", subject, "-out", csr)
    ext = f"{PKI}/{name}.ext"
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n")
        f.write(f"extendedKeyUsage={'serverAuth' if server else 'clientAuth'}\n")
        if sans:
            f.write("subjectAltName=" + ",".join(sans) + "\n")
    openssl("x509", "-req", "-in", csr, "-CA", f"{PKI}/ca.crt", "-CAkey", f"{PKI}/ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", crt)
    return crt, key


def make_pki(nodes):
    os.makedirs(PKI)
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", f"{PKI}/ca.key")
    openssl("req", "-x509", "-new", "-key", f"{PKI}/ca.key", "-subj", "/CN=devplug-e2e-ca",
            "-days", "2", "-out", f"{PKI}/ca.crt")
    make_cert("apiserver", "/CN=kube-apiserver",
              [f"IP:{API_IP}", "IP:127.0.0.1", "IP:10.212.0.1", "DNS:kubernetes",
               "DNS:kubernetes.default", "DNS:kubernetes.default.svc"], server=True)
    make_cert("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client")
    make_cert("admin", "/O=system:masters/CN=devplug-e2e-admin")
    make_cert("controller-manager", "/CN=system:kube-controller-manager")
    make_cert("scheduler", "/CN=system:kube-scheduler")
    for i in range(1, nodes + 1):
        make_cert(node_name(i), f"/O=system:nodes/CN=system:node:{node_name(i)}")
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
            "-out", f"{PKI}/sa.key")
    openssl("pkey", "-in", f"{PKI}/sa.key", "-pubout", "-out", f"{PKI}/sa.pub")


def kubeconfig(name):
    path = f"{WORK}/{name}.kubeconfig"
    with open(path, "w") as f:
        json.dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": API,
                                                     "certificate-authority": f"{PKI}/ca.crt"}}],
            "users": [{"name": name, "user": {"client-certificate": f"{PKI}/{name}.crt",
                                              "client-key": f"{PKI}/{name}.key"}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": name}}],
            "current-context": "e2e"}, f)
    return path


# ---- processes ---------------------------------------------------------------------------


PROCS = {}  # name -> Popen, of this process's children


def start(name, argv, env=None):
    """Starts argv in its own session, its output in WORK/logs/NAME.log, and
    records the PID in WORK/pids/NAME."""
    log = open(f"{WORK}/logs/{name}.log", "a")
    log.write(f"==== started at {time.time():.3f}\n")
    log.flush()
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                         env=env)
    with open(f"{WORK}/pids/{name}", "w") as f:
        f.write(str(p.pid))
    PROCS[name] = p
    return p


def alive(*names):
    """Raises where one of the named programs has exited, with its log's end."""
    for name in names:
        p = PROCS.get(name)
        if p is not None and p.poll() is not None:
            with open(f"{WORK}/logs/{name}.log") as f:
                tail = f.read()[-2000:]
            raise Failure(f"{name} exited ({p.returncode}):\n{tail}")
    return True


def stop(name, sig=signal.SIGKILL):
    """Signals the process group recorded for NAME."""
    path = f"{WORK}/pids/{name}"
    if not os.path.exists(path):
        return
    with open(path) as f:
        pid = int(f.read())
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    os.unlink(path)


def tls(user="admin"):
    ctx = ssl.create_default_context(cafile=f"{PKI}/ca.crt")
    ctx.load_cert_chain(f"{PKI}/{user}.crt", f"{PKI}/{user}.key")
    return ctx


def get(path, ctx, timeout=10):
    """(status, body) of a GET to the API server; (0, b"") where it does not answer."""
    conn = http.client.HTTPSConnection(API_IP, 6443, context=ctx, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    except OSError:
        return 0, b""
    finally:
        conn.close()


def node_of(pid):
    """The node a process runs on, from its cgroup parent (/devplug-nodeN)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                part = line.strip().split(":", 2)[2].split("/")
                if len(part) > 1 and part[1].startswith("devplug-node"):
                    return part[1]
    except OSError:
        pass
    return None


# ---- a node -----------------------------------------------------------------------------

CONTAINERD_CONFIG = """version = 3
root = "{dir}/containerd/root"
state = "{run}/containerd"
[grpc]
  address = "{run}/containerd.sock"
[ttrpc]
  address = "{run}/containerd.sock.ttrpc"
# The shims' sockets in the node's own state folder, which `down` removes
# (by default they go to the host's /run/containerd/s, where a shim that
# `down` kills leaves its socket). At most 42 characters.
[plugins.'io.containerd.shim.v1.manager']
  socket_dir = "{run}/s"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{pause}"
[plugins.'io.containerd.cri.v1.runtime']
  # root here lacks CAP_SYS_RESOURCE: runc may not lower a pod's
  # oom_score_adj below containerd's own
  restrict_oom_score_adj = true
  # pod network namespaces under the state folder, which `down` removes
  netns_mounts_under_state_dir = true
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "{run}/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{dir}/cni"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins.'io.containerd.nri.v1.nri']
  disable = true
"""

CNI_CONFIG = {
    "cniVersion": "1.0.0", "name": "devplug-e2e",
    "plugins": [{"type": "bridge", "bridge": "", "isGateway": True, "ipMasq": False,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": ""}]],
                          "dataDir": ""}},
                {"type": "loopback"}]}

KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# These machines mount cgroup v1; since 1.35 the kubelet refuses it unless
# told otherwise (KEP-5573).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /{name}
containerRuntimeEndpoint: unix://{run}/containerd.sock
address: {ip}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
failSwapOn: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: {pki}/ca.crt
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# ConfigMap volumes are refreshed every sync (default 1m): shorter, so that
# the e2e's ConfigMap edit arrives in seconds
syncFrequency: 10s
nodeStatusUpdateFrequency: {status_period}
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"""


class Node:
    def __init__(self, cluster, i):
        self.cluster = cluster
        self.i = i
        self.name = node_name(i)
        self.ns = netns(i)
        self.ip = node_ip(i)
        self.dir = f"{WORK}/{self.name}"
        self.run = f"{RUN}/{self.name}"
        self.sock = f"{self.run}/containerd.sock"
        # Where this node's kubelet root is on the host: a folder bound over
        # /var/lib/kubelet in the node's mount namespace.
        self.kubelet_root = f"{self.dir}/kubelet"
        self.plugin_dir = f"{self.kubelet_root}/device-plugins"
        # The node's /var/run/cdi, where devplugd writes and containerd reads.
        self.cdi_dir = f"{self.dir}/cdi"

    def cgroup_roots(self):
        return [f"/sys/fs/cgroup/{c}/{self.name}" for c in os.listdir("/sys/fs/cgroup")
                if os.path.isdir(f"/sys/fs/cgroup/{c}") and not os.path.islink(f"/sys/fs/cgroup/{c}")]

    def prepare(self):
        os.makedirs(f"{self.dir}/cni", exist_ok=True)
        os.makedirs(self.run, exist_ok=True)
        os.makedirs(self.kubelet_root, exist_ok=True)
        with open(f"{self.dir}/containerd.toml", "w") as f:
            f.write(CONTAINERD_CONFIG.format(dir=self.dir, run=self.run, pause=PAUSE_IMAGE))
        cni = json.loads(json.dumps(CNI_CONFIG))
        cni["plugins"][0]["bridge"] = f"devplug-cni{self.i}"
        cni["plugins"][0]["ipam"]["ranges"][0][0]["subnet"] = f"10.211.{self.i}.0/24"
        cni["plugins"][0]["ipam"]["dataDir"] = f"{self.dir}/ipam"
        with open(f"{self.dir}/cni/10-devplug-e2e.conflist", "w") as f:
            json.dump(cni, f)
        with open(f"{self.dir}/kubelet.yaml", "w") as f:
            f.write(KUBELET_CONFIG.format(name=self.name, run=self.run, ip=self.ip, pki=PKI,
                                          status_period=NODE_STATUS_PERIOD))
        for root in self.cgroup_roots():
            os.makedirs(root, exist_ok=True)
        if self.ns:
            self.make_netns()

    def make_netns(self):
        subprocess.run(["ip", "netns", "add", self.ns], check=True)
        host, inner = f"dpk8s-n{self.i}", "eth0"
        run("ip", "link", "add", host, "type", "veth", "peer", "name", inner, "netns", self.ns)
        run("ip", "link", "set", host, "master", BRIDGE, "up")
        inside = ["ip", "netns", "exec", self.ns]
        run(*inside, "ip", "addr", "add", f"{self.ip}/24", "dev", inner)
        run(*inside, "ip", "link", "set", inner, "up")
        run(*inside, "ip", "link", "set", "lo", "up")

    def wrap(self, argv):
        """A node's programs share its mount namespace (and node 2's network
        namespace), entered through a holder process."""
        enter = ["nsenter", f"--mount=/proc/{self.holder_pid()}/ns/mnt"]
        if self.ns:
            enter.append(f"--net=/run/netns/{self.ns}")
        return enter + ["--"] + argv

    def holder_pid(self):
        with open(f"{WORK}/pids/{self.name}-mounts") as f:
            return int(f.read())

    def start_mounts(self):
        """The holder of the node's mount namespace: the node's own folders
        bound over /var/lib/kubelet, the kubelet's log folders, /var/run/cdi
        and devplugd's state folder; in node
        2's network namespace, a sysfs of that namespace (as `ip netns exec`
        mounts one) with the host's cgroup hierarchies bound back under it."""
        steps = ["mount --make-rslave /"]
        if self.ns:
            keep = f"{self.run}/cgroup"
            steps += [f"mkdir -p {keep}", f"mount --rbind /sys/fs/cgroup {keep}",
                      "mount -t sysfs sysfs /sys", f"mount --rbind {keep} /sys/fs/cgroup",
                      f"umount -l {keep}"]
        binds = [(self.kubelet_root, KUBELET_ROOT), (f"{self.dir}/log/pods", "/var/log/pods"),
                 (f"{self.dir}/log/containers", "/var/log/containers"),
                 (self.cdi_dir, "/run/cdi"),
                 # devplugd's state (the DRA checkpoint): each node its own, as
                 # on real nodes (a shared one made node 1 act on node 2's claims).
                 (f"{self.dir}/devplug-state", DEVPLUG_STATE)]
        for src, dst in binds:
            note_host_dir(dst)
            steps.append(f"mkdir -p {src} {dst} && mount --bind {src} {dst}")
        argv = ["unshare", "--mount", "--propagation", "unchanged", "sh", "-ec",
                " && ".join(steps) + " && exec sleep infinity"]
        if self.ns:
            argv = ["nsenter", f"--net=/run/netns/{self.ns}", "--"] + argv
        start(f"{self.name}-mounts", argv)
        wait_for(f"{self.name}'s mount namespace",
                 lambda: alive(f"{self.name}-mounts") and self._bound(), 10)

    def _bound(self):
        try:
            with open(f"/proc/{self.holder_pid()}/mountinfo") as f:
                return any(line.split()[4] == KUBELET_ROOT for line in f)
        except (OSError, ValueError):
            return False

    def start_containerd(self):
        env = dict(os.environ, PATH=f"{self.cluster.bin}:/usr/sbin:/usr/bin:/sbin:/bin")
        start(f"{self.name}-containerd",
              self.wrap(["containerd", "--config", f"{self.dir}/containerd.toml"]), env=env)
        wait_for(f"{self.name}'s containerd",
                 lambda: alive(f"{self.name}-containerd") and os.path.exists(self.sock), 30)

    def ctr(self, *args):
        return quiet(f"{self.cluster.bin}/ctr", "--address", self.sock, "-n", "k8s.io", *args)

    def crictl(self, *args):
        return quiet(f"{self.cluster.bin}/crictl", "--config", "/dev/null",
                     "--runtime-endpoint", f"unix://{self.sock}", *args)

    def import_images(self, archives):
        for a in archives:
            self.ctr("images", "import", a)

    def start_kubelet(self):
        start(f"{self.name}-kubelet", self.wrap([
            f"{self.cluster.bin}/kubelet", "--config", f"{self.dir}/kubelet.yaml",
            "--kubeconfig", kubeconfig(self.name), "--root-dir", KUBELET_ROOT,
            "--hostname-override", self.name, "--node-ip", self.ip, "--v=2"]))

    def stop_kubelet(self):
        stop(f"{self.name}-kubelet")

    def kubelet_running(self):
        return os.path.exists(f"{WORK}/pids/{self.name}-kubelet")


# ---- the cluster -------------------------------------------------------------------------


class Cluster:
    def __init__(self, bin_dir, nodes=1, extra_args=None):
        """extra_args: program name -> arguments added to its command line
        (the fleet bench turns on audit logging and raises client QPS)."""
        self.bin = bin_dir
        self.nodes = [Node(self, i) for i in range(1, nodes + 1)]
        self.extra_args = extra_args or {}
        self.argv = {}  # program name -> its command line, for restart()
        self.env = dict(os.environ, KUBECONFIG=f"{WORK}/admin.kubeconfig")

    # -- kubectl ------------------------------------------------------------------------
    def kubectl(self, *args, check_rc=True, input=None):
        r = subprocess.run([f"{self.bin}/kubectl", *args], text=True, input=input,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)
        if check_rc and r.returncode != 0:
            raise Failure(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def helm(self, *args):
        """helm, built beside kubectl by scripts/build-cluster."""
        r = subprocess.run([f"{self.bin}/helm", *args], text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=self.env)
        if r.returncode != 0:
            raise Failure(f"helm {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def get(self, *args):
        out = self.kubectl("get", "-o", "json", *args, check_rc=False)
        return json.loads(out) if out else None

    def api(self, path):
        """GET path from the API server as its admin, without a process per
        call (the e2e polls Node status every few milliseconds); None on 404."""
        if not hasattr(self, "_tls"):
            self._tls = tls()
        status, body = get(path, self._tls)
        if status == 404:
            return None
        check(status == 200, f"GET {path}: HTTP {status}: {body[:200]!r}")
        return json.loads(body)

    def allocatable(self, node, resource):
        n = self.api(f"/api/v1/nodes/{node}")
        return int((n or {}).get("status", {}).get("allocatable", {}).get(resource, "0"))

    def apply(self, doc):
        return self.kubectl("apply", "-f", "-", input=json.dumps(doc))

    # -- up and down --------------------------------------------------------------------
    def up(self):
        t0 = time.monotonic()
        refuse_strangers()
        down(quiet=True)
        for d in ["logs", "pids"]:
            os.makedirs(f"{WORK}/{d}")
        os.makedirs(RUN, exist_ok=True)
        # The DaemonSet's hostPath makes /run/udev where no udevd runs; what
        # lands in it then is this cluster's, and `down` removes it.
        if not os.path.exists("/run/udev"):
            open(f"{WORK}/run-udev-absent", "w").close()
        make_pki(len(self.nodes))
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        run("ip", "addr", "add", f"{API_IP}/24", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
        for n in self.nodes:
            n.prepare()
        self.start_control_plane()
        say(f"control plane ready in {time.monotonic() - t0:.1f} s")
        return time.monotonic() - t0

    def start_control_plane(self):
        b = self.bin
        start("etcd", [f"{b}/etcd", "--name", "e2e", "--data-dir", f"{WORK}/etcd",
                       "--listen-client-urls", ETCD, "--advertise-client-urls", ETCD,
                       "--listen-peer-urls", "http://127.0.0.1:23800",
                       "--initial-advertise-peer-urls", "http://127.0.0.1:23800",
                       "--initial-cluster", "e2e=http://127.0.0.1:23800",
                       "--listen-metrics-urls", "http://127.0.0.1:23810",
                       "--quota-backend-bytes", str(1 << 30), "--log-level", "warn"])
        self.start("kube-apiserver", [
            f"{b}/kube-apiserver", "--etcd-servers", ETCD, "--bind-address", API_IP,
            "--advertise-address", API_IP, "--secure-port", "6443",
            "--tls-cert-file", f"{PKI}/apiserver.crt", "--tls-private-key-file", f"{PKI}/apiserver.key",
            "--client-ca-file", f"{PKI}/ca.crt",
            "--kubelet-client-certificate", f"{PKI}/apiserver-kubelet-client.crt",
            "--kubelet-client-key", f"{PKI}/apiserver-kubelet-client.key",
            "--kubelet-preferred-address-types", "InternalIP",
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", f"{PKI}/sa.pub",
            "--service-account-signing-key-file", f"{PKI}/sa.key",
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
            "--allow-privileged=true", "--profiling=false", "--v=1"])
        self.wait_apiserver()
        self.start("kube-controller-manager", [
            f"{b}/kube-controller-manager", "--kubeconfig", kubeconfig("controller-manager"),
            "--authentication-kubeconfig", kubeconfig("controller-manager"),
            "--authorization-kubeconfig", kubeconfig("controller-manager"),
            "--bind-address", "127.0.0.1", "--secure-port", "10257",
            "--service-account-private-key-file", f"{PKI}/sa.key",
            "--root-ca-file", f"{PKI}/ca.crt", "--use-service-account-credentials",
            "--leader-elect=false", "--v=1"])
        self.start("kube-scheduler", [
            f"{b}/kube-scheduler", "--kubeconfig", kubeconfig("scheduler"),
            "--authentication-kubeconfig", kubeconfig("scheduler"),
            "--authorization-kubeconfig", kubeconfig("scheduler"),
            "--bind-address", "127.0.0.1", "--secure-port", "10259",
            "--leader-elect=false", "--v=1"])
        kubeconfig("admin")
        wait_for("the default service account",
                 lambda: alive("kube-controller-manager", "kube-scheduler")
                 and self.get("serviceaccount", "default", "-n", "default"), 60, 0.2)

    def start(self, name, argv):
        self.argv[name] = argv + list(self.extra_args.get(name, []))
        return start(name, self.argv[name])

    def restart(self, name):
        """Starts NAME again with the command line it had (after stop())."""
        return start(name, self.argv[name])

    def wait_apiserver(self, timeout=90):
        admin = tls()
        wait_for("the API server's /readyz",
                 lambda: alive("etcd", "kube-apiserver") and get("/readyz", admin, 2)[0] == 200,
                 timeout, 0.05)

    def start_nodes(self, archives):
        t0 = time.monotonic()
        for n in self.nodes:
            n.start_mounts()
            n.start_containerd()
            n.import_images(archives)
            n.start_kubelet()
        for n in self.nodes:
            wait_for(f"node {n.name} Ready",
                     lambda: alive(f"{n.name}-kubelet") and self.node_ready(n.name), 120, 0.2)
        say(f"{len(self.nodes)} node(s) Ready in {time.monotonic() - t0:.1f} s")

    def node_ready(self, name):
        node = self.get("node", name)
        if not node:
            return False
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in node["status"].get("conditions", []))


def print_logs(lines=25):
    """The end of every program's log, for a failed run (down removes them)."""
    logs = sorted(glob.glob(f"{WORK}/logs/*.log"))
    logs += sorted(glob.glob(f"{WORK}/*/log/pods/devplug_devplugd-*/devplugd/*.log"))
    for path in logs:
        with open(path, errors="replace") as f:
            tail = f.read().splitlines()[-lines:]
        print(f"---- {path} (last {len(tail)} lines)")
        print("\n".join(tail))


def refuse_strangers():
    """`up` runs only where no kubelet or containerd runs that it did not start."""
    ours = set()
    if os.path.isdir(f"{WORK}/pids"):
        for name in os.listdir(f"{WORK}/pids"):
            with open(f"{WORK}/pids/{name}") as f:
                ours.add(int(f.read()))
    for prog in ["kubelet", "containerd"]:
        found = subprocess.run(["pgrep", "-x", prog], text=True, stdout=subprocess.PIPE).stdout
        for pid in map(int, found.split()):
            try:
                sid = os.getsid(pid)
            except ProcessLookupError:
                continue
            if zombie(pid):
                continue  # killed by an earlier `down`, not reaped yet: it runs no more
            check(sid in ours, f"a {prog} runs here that this harness did not start (pid {pid}); "
                               "stop it first")


def down(quiet=False):
    """Stops everything recorded under WORK/pids, then whatever is still
    found by its paths (a run killed before it wrote a PID), then removes
    what `up` made."""
    if os.path.isdir(f"{WORK}/pids"):
        for name in sorted(os.listdir(f"{WORK}/pids")):
            stop(name)
    for pattern in [f"{WORK}/", f"{RUN}/", f" --kubeconfig {WORK}/"]:
        for pid in pids_of(pattern):
            kill(pid)
    # Containers outlive their shims: every process in a node's cgroup parent.
    groups = [f"/sys/fs/cgroup/{c}/{node_name(i)}" for c in os.listdir("/sys/fs/cgroup")
              for i in (1, 2)] if os.path.isdir("/sys/fs/cgroup") else []
    for _ in range(50):
        pids = {pid for g in groups for pid in cgroup_pids(g)}
        if not pids:
            break
        for pid in pids:
            kill(pid)
        time.sleep(0.1)
    time.sleep(0.2)
    for point in mounts_under(WORK, RUN):
        subprocess.run(["umount", "-l", point], stderr=subprocess.DEVNULL)
    for i in (2, 3):
        subprocess.run(["ip", "netns", "delete", netns(i)], stderr=subprocess.DEVNULL)
    for link in [BRIDGE, "devplug-cni1", "dpk8s-n2"]:
        subprocess.run(["ip", "link", "delete", link], stderr=subprocess.DEVNULL)
    for c in os.listdir("/sys/fs/cgroup") if os.path.isdir("/sys/fs/cgroup") else []:
        for i in (1, 2):
            remove_cgroup(f"/sys/fs/cgroup/{c}/{node_name(i)}")
    # Every process killed above is gone (or a zombie) before `down` returns,
    # so an `up` right after finds none of them.
    for _ in range(100):
        alive = [pid for pattern in [f"{WORK}/", f"{RUN}/", f" --kubeconfig {WORK}/"]
                 for pid in pids_of(pattern) if not zombie(pid)]
        if not alive:
            break
        for pid in alive:
            kill(pid)
        time.sleep(0.1)
    # Host folders that exist only because a node's mount namespace made its
    # mount points: removed when empty (never one that was there before).
    if os.path.exists(f"{WORK}/run-udev-absent"):
        shutil.rmtree("/run/udev", ignore_errors=True)
    created = []
    if os.path.exists(f"{WORK}/host-dirs"):
        with open(f"{WORK}/host-dirs") as f:
            created = [line.strip() for line in f if line.strip()]
    for p in [WORK, RUN]:
        shutil.rmtree(p, ignore_errors=True)
    for d in sorted(set(created), key=len, reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass  # not empty: something else put files there
    if not quiet:
        say("down: stopped and removed")


def zombie(pid):
    """True when `pid` has exited and waits for its parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True  # gone


def note_host_dir(path):
    """Remembers each folder of `path` that does not exist yet on the host (a
    node's mount point that mkdir will make), for `down` to remove."""
    missing = []
    while path not in ("", "/") and not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    if missing:
        with open(f"{WORK}/host-dirs", "a") as f:
            f.write("".join(m + "\n" for m in missing))


def cgroup_pids(path):
    pids = set()
    for folder, _, files in os.walk(path):
        if "cgroup.procs" in files:
            try:
                with open(f"{folder}/cgroup.procs") as f:
                    pids.update(int(p) for p in f.read().split())
            except OSError:
                pass
    return pids


def remove_cgroup(path):
    if not os.path.isdir(path) or os.path.islink(path):
        return
    for entry in os.listdir(path):
        if os.path.isdir(f"{path}/{entry}"):
            remove_cgroup(f"{path}/{entry}")
    try:
        os.rmdir(path)
    except OSError:
        pass
