"""The node scripts/e2e runs: containerd, runc and the real kubelet, started
by hand, with images built here (nothing is pulled), a ConfigMap folder
written as the kubelet's atomic writer does, and a cleanup that also mends
what an earlier, killed run left."""
import copy
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import yaml

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = "/var/tmp/devplug-e2e"
KUBELET_ROOT = "/var/lib/kubelet"
PLUGIN_DIR = KUBELET_ROOT + "/device-plugins"
REGISTRY_DIR = KUBELET_ROOT + "/plugins_registry"
NODE = "devplug-e2e"
PAUSE_IMAGE = "localhost/devplug-e2e-pause:1"
CONTAINERD_SOCK = WORK + "/containerd/containerd.sock"


def say(msg):
    print(f"e2e: {msg}", flush=True)


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE, **kw).stdout


def wait_for(what, pred, timeout, interval=0.01):
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > end:
            raise Failure(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def boottime():
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def process_start(pid):
    """When a process started, on CLOCK_BOOTTIME (clock ticks resolution)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


def connectable(path, kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_UNIX, kind)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


# ---- cleaning up, also after an earlier run that was killed ---------------------------


def mounts_under(*prefixes):
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if any(point == p or point.startswith(p + "/") for p in prefixes):
                found.append(point)
    return sorted(set(found), key=len, reverse=True)


def pids_of(pattern):
    out = subprocess.run(["pgrep", "-f", pattern], text=True, stdout=subprocess.PIPE).stdout
    return [int(p) for p in out.split() if int(p) != os.getpid()]


UDEVD = "/lib/systemd/systemd-udevd"


def start_udevd():
    """Real nodes run udevd, and devplugd then listens to it: through the
    pod's /run/udev mount and the host's network namespace. Where none runs,
    start one on the host's /run/udev with no rules (it changes nothing; it
    only announces events once processed). Returns the source devplugd will
    resolve."""
    if connectable("/run/udev/control", socket.SOCK_SEQPACKET):
        say("udevd runs on this machine: devplugd will listen to it")
        return "udev"
    if not os.access(UDEVD, os.X_OK):
        say("no systemd-udevd here: devplugd will listen to the kernel")
        return "kernel"
    script = ("for d in /lib/udev/rules.d /etc/udev/rules.d; do "
              "[ -d $d ] && mount -t tmpfs tmpfs $d; done; "
              f"exec {UDEVD} --resolve-names=never")
    p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    with open(f"{WORK}/udevd.pid", "w") as f:
        f.write(str(p.pid))
    wait_for("udevd's control socket", lambda: connectable("/run/udev/control", socket.SOCK_SEQPACKET), 20)
    say(f"started systemd-udevd (no rules) on /run/udev: devplugd will listen to it")
    return "udev"


OURS = KUBELET_ROOT + "/.devplug-e2e"  # marks a kubelet root the e2e made


def claim_node():
    """Makes /var/lib/kubelet the e2e's own; fails where it holds state the
    e2e did not make (a kubelet that is stopped now), which cleanup() would
    otherwise remove."""
    if os.path.isdir(KUBELET_ROOT) and os.listdir(KUBELET_ROOT) and not os.path.exists(OURS):
        raise Failure(f"{KUBELET_ROOT} holds state the e2e did not make; move it away first")
    cleanup()
    os.makedirs(WORK)
    os.makedirs(KUBELET_ROOT, exist_ok=True)
    open(OURS, "w").close()
    if not os.path.exists("/run/udev"):  # the pod's hostPath would make it
        open(f"{WORK}/run-udev-absent", "w").close()


def kill(pid):
    """SIGKILL, where the process may have gone between its lookup and now
    (a shim exits on its own once its last task is killed)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def cleanup():
    if os.path.exists(f"{WORK}/udevd.pid"):
        with open(f"{WORK}/udevd.pid") as f:
            kill(int(f.read()))
        time.sleep(0.1)
        if os.path.exists("/run/udev/control"):
            os.unlink("/run/udev/control")  # ours, dead: no stale socket left
    if os.path.exists(f"{WORK}/run-udev-absent"):
        shutil.rmtree("/run/udev", ignore_errors=True)
    for pid in pids_of(f" --config {WORK}/kubelet.yaml"):
        kill(pid)
    if os.path.exists(CONTAINERD_SOCK):
        ctr = ["ctr", "--address", CONTAINERD_SOCK, "-n", "k8s.io"]
        tasks = subprocess.run(ctr + ["tasks", "ls", "-q"], text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.split()
        for t in tasks:
            subprocess.run(ctr + ["tasks", "kill", "-s", "SIGKILL", t],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for pid in pids_of(f"containerd-shim-runc-v2 .*{WORK}/"):
        kill(pid)
    for pid in pids_of(f"containerd --config {WORK}/"):
        kill(pid)
    time.sleep(0.2)
    for point in mounts_under(KUBELET_ROOT, WORK, "/run/containerd-e2e"):
        subprocess.run(["umount", "-l", point], stderr=subprocess.DEVNULL)
    paths = [WORK, "/run/containerd-e2e"]
    if os.path.exists(OURS) or not os.path.exists(KUBELET_ROOT):
        paths.append(KUBELET_ROOT)
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    for path in glob.glob(f"/var/log/pods/*-{NODE}_*") + glob.glob(f"/var/log/containers/*-{NODE}_*"):
        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)


# ---- the images ------------------------------------------------------------------------


def build_images(work=WORK):
    """devplug's image and the pause image, as OCI archives under work."""
    os.makedirs(work, exist_ok=True)
    out = f"{work}/devplug.oci.tar"
    log = run(f"{SRC}/scripts/build-image", "--out", out)
    print(log, end="")
    name = re.search(r"build-image: (\S+) ->", log).group(1)

    # The sandbox and the test workload: one static binary, one layer.
    root = f"{work}/pause-root"
    os.makedirs(root)
    run("gcc", "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o", f"{root}/pause",
        f"{SRC}/tests/e2e/pause.c")
    run("strip", f"{root}/pause")
    run(f"{SRC}/scripts/oci-archive", root, PAUSE_IMAGE, f"{work}/pause.oci.tar",
        "--config.entrypoint", "/pause")
    return name, out


def podman_loads(archive, name):
    """The same archive through podman (its own store under WORK)."""
    store = ["podman", "--root", f"{WORK}/podman/root", "--runroot", f"{WORK}/podman/run"]
    run(*store, "load", "-i", archive, stderr=subprocess.STDOUT)
    names = run(*store, "images", "--format", "{{.Repository}}:{{.Tag}}").split()
    check(name in names, f"podman load named the image {names}, expected {name}")
    run(*store, "rmi", "-a", stderr=subprocess.STDOUT)


PODMAN_TUN = "e2e.devplug.dev/tun"
PODMAN_SPEC = "/var/run/cdi/devplug-devplug.e2e.devplug.dev-tun.json"


def podman_cdi():
    """Debian's podman 4.3 runs a container with `--device <devplug's CDI
    name>` that opens /dev/net/tun from the spec devplugd wrote (podman
    reads /etc/cdi and /var/run/cdi only). Returns the CDI name used."""
    # scripts/build-image built it (scripts/pkg-build: build-pkg or DEVPLUG_PKG_BUILD)
    build = os.path.join(SRC, os.environ.get("DEVPLUG_PKG_BUILD", "build-pkg"))
    os.makedirs(f"{WORK}/podman-cdi/plug", exist_ok=True)
    config = f"{WORK}/podman-cdi/devplug.toml"
    with open(config, "w") as f:
        f.write(f'[agent]\nplugin_dir = "{WORK}/podman-cdi/plug"\ncontrol_socket = ""\n'
                f'module_dir = "{build}/modules"\ncdi = "cri"\n'
                f'dra_state_dir = "{WORK}/podman-cdi/state"\n'
                f'[[resource]]\nname = "{PODMAN_TUN}"\nmodule = "generic"\n'
                'paths = ["/dev/net/tun"]\n')
    log = open(f"{WORK}/podman-cdi/devplugd.log", "w")
    agent = subprocess.Popen([f"{build}/agent/devplugd", "--config", config], stdout=log,
                             stderr=subprocess.STDOUT)
    store = ["podman", "--root", f"{WORK}/podman/root", "--runroot", f"{WORK}/podman/run"]
    try:
        wait_for("devplugd's CDI spec", lambda: os.path.exists(PODMAN_SPEC), 20)
        run(*store, "load", "-i", f"{WORK}/pause.oci.tar", stderr=subprocess.STDOUT)
        name = f"devplug.{PODMAN_TUN}=net_tun"
        # Root here lacks CAP_SYS_RESOURCE: podman's default rlimits (its own
        # maximum) are more than runc may set, so ask for less.
        limits = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
        logs = {}
        for probe, device in [("cdi-probe", ["--device", name]), ("no-device", [])]:
            run(*store, "run", "-d", "--pull", "never", "--name", probe, "--network", "none",
                *limits, *device, PAUSE_IMAGE, "--open", "/dev/net/tun", stderr=subprocess.STDOUT)
            logs[probe] = wait_for(
                f"{probe}'s checks",
                lambda: (lambda out: out if "checks done" in out else None)(
                    run(*store, "logs", probe, stderr=subprocess.STDOUT)), 30, 0.1)
            run(*store, "rm", "-f", probe, stderr=subprocess.STDOUT)
        check("open /dev/net/tun: ok" in logs["cdi-probe"],
              f"podman --device {name} gave no /dev/net/tun:\n{logs['cdi-probe']}")
        check("open /dev/net/tun: ok" not in logs["no-device"],
              "the container opened /dev/net/tun without the CDI device")
        return name
    finally:
        agent.terminate()
        agent.wait()
        # devplugd leaves its specs at exit (a container restarted meanwhile
        # still needs them); this one is the test's.
        if os.path.exists(PODMAN_SPEC):
            os.unlink(PODMAN_SPEC)
        subprocess.run(store + ["rm", "-af"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(store + ["rmi", "-a"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# ---- containerd --------------------------------------------------------------------------

CONTAINERD_CONFIG = """version = 2
root = "{work}/containerd/root"
state = "/run/containerd-e2e"
[grpc]
  address = "{sock}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""


def start_containerd(archives):
    os.makedirs(f"{WORK}/containerd", exist_ok=True)
    with open(f"{WORK}/containerd.toml", "w") as f:
        f.write(CONTAINERD_CONFIG.format(work=WORK, sock=CONTAINERD_SOCK, pause=PAUSE_IMAGE))
    log = open(f"{WORK}/containerd.log", "w")
    subprocess.Popen(["containerd", "--config", f"{WORK}/containerd.toml"], stdout=log,
                     stderr=subprocess.STDOUT, start_new_session=True)
    wait_for("containerd's socket", lambda: os.path.exists(CONTAINERD_SOCK), 30)
    ctr = ["ctr", "--address", CONTAINERD_SOCK, "-n", "k8s.io"]
    for archive in archives:
        run(*ctr, "images", "import", archive)
    images = run(*ctr, "images", "ls", "-q").split()
    return images


# ---- the kubelet -------------------------------------------------------------------------

KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: {work}/manifests
fileCheckFrequency: 5s
failSwapOn: false
makeIPTablesUtilChains: false
cgroupDriver: cgroupfs
address: 127.0.0.1
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
# the images are imported, never pulled: image GC on a nearly full disk would
# delete them before the first pod starts (100 turns it off)
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"""


class Kubelet:
    def __init__(self, binary):
        self.binary = binary
        self.proc = None
        os.makedirs(f"{WORK}/manifests", exist_ok=True)
        with open(f"{WORK}/kubelet.yaml", "w") as f:
            f.write(KUBELET_CONFIG.format(work=WORK))
        self.log = open(f"{WORK}/kubelet.log", "a")

    def start(self):
        self.log.write(f"==== e2e: kubelet started at {time.time():.3f}\n")
        self.log.flush()
        self.proc = subprocess.Popen(
            [self.binary, "--config", f"{WORK}/kubelet.yaml", "--container-runtime", "remote",
             "--container-runtime-endpoint", f"unix://{CONTAINERD_SOCK}",
             "--root-dir", KUBELET_ROOT, "--hostname-override", NODE, "--v=3"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def log_since_start(self):
        with open(f"{WORK}/kubelet.log") as f:
            return f.read().rsplit("==== e2e: kubelet started", 1)[1]

    def kill(self):
        self.proc.kill()
        self.proc.wait()


# ---- manifests -------------------------------------------------------------------------


def load_manifests():
    """deploy/kubernetes as `kubectl apply -k` would take it."""
    folder = f"{SRC}/deploy/kubernetes"
    if shutil.which("kubectl"):
        docs = list(yaml.safe_load_all(run("kubectl", "kustomize", folder)))
        say("manifests rendered by kubectl kustomize")
    else:
        with open(f"{folder}/kustomization.yaml") as f:
            kustomization = yaml.safe_load(f)
        docs = []
        for r in kustomization["resources"]:
            with open(f"{folder}/{r}") as f:
                docs += list(yaml.safe_load_all(f))
        say("manifests read from kustomization.yaml's resources (no kubectl here)")
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    check(len(by_kind.get("DaemonSet", [])) == 1, "deploy/kubernetes must hold one DaemonSet")
    check(len(by_kind.get("ConfigMap", [])) == 1, "deploy/kubernetes must hold one ConfigMap")
    return by_kind["DaemonSet"][0], by_kind["ConfigMap"][0]


class ConfigFolder:
    """A ConfigMap volume as the kubelet writes one: each key a symlink to
    ..data/<key>, ..data a symlink to a timestamped folder; an update writes
    a new folder and renames a new ..data over the old one."""

    def __init__(self, path):
        self.path = path
        self.generation = 0
        os.makedirs(path)

    def write(self, data):
        self.generation += 1
        stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{self.generation}"
        os.makedirs(f"{self.path}/{stamp}")
        for key, value in data.items():
            with open(f"{self.path}/{stamp}/{key}", "w") as f:
                f.write(value)
        old = os.readlink(f"{self.path}/..data") if os.path.islink(f"{self.path}/..data") else None
        os.symlink(stamp, f"{self.path}/..data_tmp")
        os.rename(f"{self.path}/..data_tmp", f"{self.path}/..data")
        for key in data:
            if not os.path.islink(f"{self.path}/{key}"):
                os.symlink(f"..data/{key}", f"{self.path}/{key}")
        if old:
            shutil.rmtree(f"{self.path}/{old}")


def static_pod(ds, cm, config_dir):
    """The DaemonSet's pod template as a static pod; its ConfigMap volume a
    folder the test writes as the kubelet would."""
    template = ds["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": ds["metadata"]["name"], "namespace": ds["metadata"]["namespace"],
                        "labels": template["metadata"]["labels"]},
           "spec": copy.deepcopy(template["spec"])}
    for v in pod["spec"]["volumes"]:
        if "configMap" in v:
            check(v["configMap"]["name"] == cm["metadata"]["name"],
                  f"volume {v['name']} names ConfigMap {v['configMap']['name']}, "
                  f"deploy/kubernetes holds {cm['metadata']['name']}")
            del v["configMap"]
            v["hostPath"] = {"path": config_dir, "type": "Directory"}
    return pod


def consumer_pod(name, resource):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"hostNetwork": True, "terminationGracePeriodSeconds": 2,
                     "containers": [{
                         "name": "probe", "image": PAUSE_IMAGE, "imagePullPolicy": "Never",
                         "command": ["/pause", "--open", "/dev/net/tun"],
                         "resources": {"limits": {resource: 1}}}]}}


def put_manifest(name, pod):
    tmp = f"{WORK}/{name}.yaml.tmp"
    with open(tmp, "w") as f:
        yaml.safe_dump(pod, f)
    os.rename(tmp, f"{WORK}/manifests/{name}.yaml")


def container_log(pod, container):
    logs = sorted(glob.glob(f"/var/log/pods/*_{pod}-{NODE}_*/{container}/*.log"))
    if not logs:
        return ""
    with open(logs[-1]) as f:
        return f.read()
