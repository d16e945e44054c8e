# devplug %pre ($1: 1 on install, 2 on upgrade): before an upgrade replaces
# the files, note it for %posttrans and keep a copy of the unit the running
# devplugd was started from: %posttrans hands the running devplugd over to
# the installed one only when the new unit is the same (a handover keeps the
# old process's sandbox; only a restart applies new unit settings).
rm -f /run/devplug-unit.before /run/devplug-upgrade
if [ "$1" -ge 2 ] && [ -d /run/systemd/system ]; then
  : >/run/devplug-upgrade
  fragment=$(systemctl show -p FragmentPath --value devplugd.service 2>/dev/null || :)
  if [ -n "$fragment" ] && [ -f "$fragment" ]; then
    cp "$fragment" /run/devplug-unit.before || :
  fi
fi
exit 0
