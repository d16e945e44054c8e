# devplug %postun ($1: 0 on erase, 1 on upgrade)
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || :
  if [ "$1" -ge 1 ]; then
    systemctl try-restart devplugd.service >/dev/null 2>&1 || :
  fi
fi
if [ "$1" -eq 0 ]; then
  rm -f /var/lib/kubelet/device-plugins/devplug-*.sock
fi
exit 0
