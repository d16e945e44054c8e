# devplug %post ($1: 1 on install, 2 on upgrade)
if command -v systemd-tmpfiles >/dev/null 2>&1; then
  systemd-tmpfiles --create devplug.conf >/dev/null 2>&1 || :
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || :
  if [ "$1" -eq 1 ]; then
    systemctl enable --now devplugd.service ||
      echo "devplug: devplugd did not start; see: systemctl status devplugd" >&2
  fi
elif [ "$1" -eq 1 ] && command -v systemctl >/dev/null 2>&1; then
  systemctl enable devplugd.service >/dev/null 2>&1 || :
fi
exit 0
