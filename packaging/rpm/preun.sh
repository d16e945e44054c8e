# devplug %preun ($1: 0 on erase, 1 on upgrade)
if [ "$1" -eq 0 ]; then
  if [ -d /run/systemd/system ]; then
    systemctl disable --now devplugd.service >/dev/null 2>&1 || :
  elif command -v systemctl >/dev/null 2>&1; then
    systemctl disable devplugd.service >/dev/null 2>&1 || :
  fi
fi
exit 0
