# devplug %posttrans: after an upgrade (%pre noted it), hand the running
# devplugd over to the installed one (`devplugctl handover`: the new process
# serves before the old one leaves, so no Allocate finds nobody serving).
# A restart instead when the unit changed (only a restart applies it), when
# devplugctl is missing, or when the handover fails (an older devplugd knows
# none; the new one rejects the configuration). A stopped devplugd stays
# stopped. It runs once the whole transaction is done, from the new package,
# so the old package's %postun need not know about it.
unit=devplugd.service
before=/run/devplug-unit.before
[ -f /run/devplug-upgrade ] || exit 0
rm -f /run/devplug-upgrade
if [ ! -d /run/systemd/system ]; then
  rm -f "$before"
  exit 0
fi
unit_changed=yes
fragment=$(systemctl show -p FragmentPath --value "$unit" 2>/dev/null || :)
if [ -f "$before" ] && [ -n "$fragment" ] && cmp -s "$before" "$fragment" 2>/dev/null; then
  unit_changed=no
fi
rm -f "$before"
systemctl daemon-reload >/dev/null 2>&1 || :
systemctl is-active --quiet "$unit" || exit 0
if [ "$unit_changed" = no ] && [ -x /usr/bin/devplugctl ]; then
  if answer=$(/usr/bin/devplugctl handover 2>&1); then
    echo "devplug: $answer"
    exit 0
  fi
  echo "devplug: devplugd did not hand over ($answer); restarting it" >&2
fi
systemctl try-restart "$unit" >/dev/null 2>&1 ||
  echo "devplug: devplugd did not restart; see: systemctl status devplugd" >&2
exit 0
