"""What scripts/e2e asks devplugd in its pod (through its control socket,
reached by /proc/<pid>/root) and the kernel (who hears which uevent)."""
import json
import os
import re
import socket
import subprocess
import sys

from node import check, connectable

# ---- devplugd in its pod -----------------------------------------------------------------


def devplugd_pids():
    pids = []
    for pid in subprocess.run(["pgrep", "-x", "devplugd"], text=True,
                              stdout=subprocess.PIPE).stdout.split():
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                if "kubepods" in f.read():
                    pids.append(int(pid))
        except FileNotFoundError:
            pass
    return pids


def ask(pid, request):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(f"/proc/{pid}/root/run/devplug/control.sock")
        s.sendall(json.dumps(request).encode() + b"\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    finally:
        s.close()
    return json.loads(answer)


def status(pid):
    try:
        return ask(pid, {"status": {}})
    except (OSError, ValueError):
        return None


def metric(pid, name, **labels):
    try:
        text = ask(pid, {"metrics": {}})["metrics"]
    except (OSError, ValueError):
        return None
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"(\w+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def all_registered(pid, names, mode):
    st = status(pid)
    if not st:
        return None
    rs = {r["name"]: r for r in st["resources"]}
    for n in names:
        r = rs.get(n)
        if not r or r["registration"] != mode or not r["registered"] or not r["kubelet_connected"]:
            return None
    return st


def socket_inodes(folder):
    return {name: os.stat(f"{folder}/{name}").st_ino
            for name in os.listdir(folder) if name.startswith("devplug-")}


LISTENER = r"""
import socket, sys, time
group, marker = int(sys.argv[1]), sys.argv[2].encode()
s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)  # NETLINK_KOBJECT_UEVENT
s.bind((0, group))
print("ready", flush=True)
s.settimeout(0.1)
heard, end = 0, time.monotonic() + 1.0
while time.monotonic() < end:
    try:
        heard += marker in s.recv(65536)
    except socket.timeout:
        pass
print(heard)
"""

UDEV_MARKER = "devplug-e2e-udev-probe"


def send_uevent(group):
    if group == 1:  # the kernel's own
        with open("/sys/class/misc/tun/uevent", "w") as f:
            f.write("change")
    else:  # as udevd sends its messages: multicast from the host's namespace
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)
        s.sendto(f"libudev\0{UDEV_MARKER}".encode(), (0, group))
        s.close()


def heard_in(prefix, group):
    marker = "DEVPATH=/devices/virtual/misc/tun" if group == 1 else UDEV_MARKER
    p = subprocess.Popen(prefix + [sys.executable, "-c", LISTENER, str(group), marker],
                         text=True, stdout=subprocess.PIPE)
    check(p.stdout.readline().strip() == "ready", "uevent listener did not start")
    send_uevent(group)
    heard = int(p.stdout.read().strip())
    p.wait()
    return heard


def uevent_namespaces():
    """Which network namespaces hear what: the kernel broadcasts untagged
    uevents (group 1) into every network namespace owned by the initial user
    namespace, so a pod without hostNetwork hears them unless it has a user
    namespace; udevd's messages (group 2) are multicast in the host's
    namespace only. devplugd listens to udevd where it runs, so it needs
    hostNetwork."""
    host, pod = [], ["unshare", "--net"]
    return {
        "kernel, host": heard_in(host, 1),
        "kernel, pod netns": heard_in(pod, 1),
        "kernel, pod netns + user ns": heard_in(["unshare", "--user", "--map-root-user", "--net"], 1),
        "udevd, host": heard_in(host, 2),
        "udevd, pod netns": heard_in(pod, 2),
    }


def resource_names(toml_text):
    return re.findall(r'^name = "([^"]+)"', toml_text, re.M)


def memory_peak(pid):
    """devplugd's peak resident size and its container's peak memory charge."""
    with open(f"/proc/{pid}/status") as f:
        hwm = int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) / 1024
    with open(f"/proc/{pid}/cgroup") as f:
        path = next(line.split(":", 2)[2].strip() for line in f if ":memory:" in line)
    with open(f"/sys/fs/cgroup/memory{path}/memory.max_usage_in_bytes") as f:
        return hwm, int(f.read()) / 1048576
