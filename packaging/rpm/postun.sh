# devplug %postun ($1: 0 on erase, 1 on upgrade). An upgrade's handover or
# restart is the new package's %posttrans.
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || :
fi
if [ "$1" -eq 0 ]; then
  rm -f /var/lib/kubelet/device-plugins/devplug-*.sock
fi
exit 0
