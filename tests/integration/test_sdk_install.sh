#!/bin/sh
# test_sdk_install.sh BUILD_DIR SOURCE_DIR [EXTRA_CFLAGS] — the SDK as a user gets it:
#  1. client/example.c compiles and links against the build tree's header and library;
#  2. `cmake --install` (components sdk, tools, systemd) into a temp prefix puts the
#     header, both libraries, pkg-config file, kvctl, kvd-bench, units and sample
#     config in place;
#  3. the example compiles against the installed header with the shared library and
#     with the static one, and runs: with no kvd it reports the error and exits 1 fast.
set -u
build=$1
src=$2
extra=${3:-}
cc=${CC:-cc}
tmp=$(mktemp -d /tmp/kvd-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

$cc $extra -I"$src/client" -I"$build/include" "$src/client/example.c" -L"$build/lib" \
    -lkvd-client -o "$tmp/example-build" || fail "example does not build against the build tree"

cmake --install "$build" --prefix "$tmp/prefix" --component sdk >/dev/null || fail "install sdk"
cmake --install "$build" --prefix "$tmp/prefix" --component tools >/dev/null || fail "install tools"
cmake --install "$build" --prefix "$tmp/prefix" --component systemd >/dev/null || fail "install systemd"
p=$tmp/prefix
libdir=$(ls -d "$p"/lib* | head -1)
[ -f "$p/lib/x86_64-linux-gnu/libkvd-client.so" ] && libdir=$p/lib/x86_64-linux-gnu
for f in "$p/include/kvd_client.h" "$p/include/kvd_err.h" "$libdir/libkvd-client.a" \
         "$libdir/libkvd-client.so" "$libdir/pkgconfig/kvd-client.pc" "$p/bin/kvctl" \
         "$p/bin/kvd-bench" "$p/lib/systemd/system/kvd.service" \
         "$p/lib/systemd/system/kvd-broker.service" "$p/etc/kvd/kvd.conf" \
         "$p/lib/sysusers.d/kvd.conf"; do
    [ -e "$f" ] || fail "not installed: $f"
done
grep -q "ExecStart=$p/bin/kvd " "$p/lib/systemd/system/kvd.service" ||
    grep -q "ExecStart=.*/bin/kvd " "$p/lib/systemd/system/kvd.service" || fail "unit ExecStart"

# shared
$cc $extra -I"$p/include" "$src/client/example.c" -L"$libdir" -lkvd-client \
    -o "$tmp/example-shared" || fail "example does not build against the installed .so"
# static: only the installed archive plus its documented private deps
$cc $extra -I"$p/include" "$src/client/example.c" "$libdir/libkvd-client.a" \
    -lnanomsg -lmsgpackc -lpthread -o "$tmp/example-static" || fail "static link"
# the .so exports the kvd_ API only
if nm -D --defined-only "$libdir/libkvd-client.so" | awk '{print $3}' | grep -v '^kvd_' |
    grep -v '^_' | grep -q .; then
    fail "libkvd-client.so exports non-kvd_ symbols"
fi
mkdir "$tmp/rt"
start=$(date +%s)
for x in example-shared example-static; do
    out=$(LD_LIBRARY_PATH="$libdir" KVD_RUNTIME_DIR="$tmp/rt" "$tmp/$x" 2>&1)
    rc=$?
    [ $rc -eq 1 ] || fail "$x without kvd: exit $rc, expected 1 ($out)"
    echo "$out" | grep -q "cannot connect to kvd" || fail "$x: no error message ($out)"
done
[ $(( $(date +%s) - start )) -le 5 ] || fail "examples took too long without kvd"
echo "sdk install verified"
