#!/bin/sh
# test_systemd_units.sh UNITDIR — `systemd-analyze verify` on the rendered kvd units
# (build-tree paths, so ExecStart binaries exist); any warning fails, not just errors.
# Then checks that the units carry what issue 5 requires. Skips (77) without
# systemd-analyze or without the built binaries.
dir=$1
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "skipped: systemd-analyze is not installed"
    exit 77
fi
for b in kvd kvd-broker; do
    bin=$(sed -n "s#^ExecStart=\([^ ]*/$b\) .*#\1#p" "$dir/$b.service" 2>/dev/null)
    [ -z "$bin" ] && bin=$(sed -n "s#^ExecStart=\([^ ]*\) .*#\1#p" "$dir/kvd.service")
    if [ ! -x "$bin" ]; then
        echo "skipped: $bin is not built"
        exit 77
    fi
done
out=$(systemd-analyze verify --man=no "$dir/kvd-broker.service" "$dir/kvd.service" 2>&1)
rc=$?
if [ $rc -ne 0 ] || [ -n "$out" ]; then
    echo "systemd-analyze verify failed (rc $rc):"
    printf '%s\n' "$out"
    exit 1
fi
fail=0
need() { # FILE PATTERN WHY
    if ! grep -q -- "$2" "$dir/$1"; then
        echo "FAIL: $1 lacks '$2' ($3)"
        fail=1
    fi
}
for u in kvd-broker.service kvd.service; do
    need $u '^Type=notify$' "readiness through sd_notify"
    need $u '^WatchdogSec=' "watchdog"
    need $u '^User=kvd$' "dedicated user"
    need $u '^NoNewPrivileges=yes$' "hardening"
    need $u '^ProtectSystem=strict$' "hardening"
    need $u '^PrivateTmp=yes$' "hardening"
    need $u '^DevicePolicy=closed$' "devices closed by default"
    need $u '^DeviceAllow=/dev/nvidiactl rw$' "GPU access allowed explicitly"
done
need kvd-broker.service '^RuntimeDirectory=kvd$' "runtime directory"
need kvd-broker.service '^RuntimeDirectoryMode=0750$' "runtime directory mode"
need kvd-broker.service '^RuntimeDirectoryPreserve=restart$' "pool dir survives restarts"
need kvd.service '^BindsTo=kvd-broker.service$' "kvd bound to the broker"
need kvd.service '^After=kvd-broker.service$' "kvd after the broker"
need kvd.service '--broker /run/kvd' "kvd uses the broker's pool"
if grep -q '^RuntimeDirectory=' "$dir/kvd.service"; then
    echo "FAIL: kvd.service must not own /run/kvd (stopping kvd would remove the broker's sockets)"
    fail=1
fi
[ $fail -eq 0 ] && echo "units verified: $dir"
exit $fail
