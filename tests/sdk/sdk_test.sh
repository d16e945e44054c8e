#!/usr/bin/env bash
# A vendor's view of the SDK: install it into an empty prefix, build the
# example module out of tree with nothing but that prefix (pkg-config, then
# the CMake package), check the ABI-major gate, and have devplugd load and
# register each build against the kubelet simulator.
#   sdk_test.sh <build dir> <source dir> <devplugctl>
set -euo pipefail
build=$1 src=$2 ctl=$3
work=$(mktemp -d /tmp/devplug-sdk.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/prefix" --component sdk >/dev/null
[[ -f $work/prefix/include/devplug/module.h ]] || fail "header not installed"

# 1. pkg-config, with a copy of the example outside the source tree.
cp -r "$src/modules/example" "$work/example"
export PKG_CONFIG_PATH=$work/prefix/share/pkgconfig
[[ $(pkg-config --modversion devplug-module) == 1.* ]] || fail "pkg-config version"
moduledir=$(pkg-config --variable=moduledir devplug-module)
[[ $moduledir == "$work/prefix/"*/devplug/modules ]] || fail "moduledir is $moduledir"
cc -std=c99 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden -Wl,--no-undefined \
   $(pkg-config --cflags devplug-module) "$work/example/example.c" -o "$work/pc-example.so"
exported=$(nm -D --defined-only "$work/pc-example.so" | awk '$2 == "T" {print $3}')
[[ $exported == devplug_module_entry_v1 ]] || fail "exports: $exported"

# 2. The CMake package and its helper.
cmake -S "$work/example" -B "$work/cm" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cm" >/dev/null
[[ -f $work/cm/example.so ]] || fail "CMake build made no example.so"
cmake --install "$work/cm" >/dev/null
[[ -f $moduledir/example.so ]] || fail "example.so not installed into $moduledir"

# 3. Only ABI major 1 is accepted.
mkdir -p "$work/major2"
cat > "$work/major2/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(wants-major-2 LANGUAGES C)
find_package(devplug-module 2 CONFIG REQUIRED)
CM
if cmake -S "$work/major2" -B "$work/major2/b" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null 2>&1; then
  fail "find_package(devplug-module 2) succeeded"
fi

# 4. devplugd loads and registers each build.
for so in "$work/pc-example.so" "$moduledir/example.so"; do
  cat > "$work/devplug.toml" <<TOML
[[resource]]
name = "example.com/thing"
module = "$so"
count = 3
TOML
  out=$("$ctl" demo --config "$work/devplug.toml" 2>&1) || { echo "$out"; fail "demo with $so"; }
  grep -q "example.com/thing .* 3 *3" <<<"$out" || { echo "$out"; fail "devices of $so"; }
  grep -q '"container_path": "/dev/example-0"' <<<"$out" || { echo "$out"; fail "Allocate of $so"; }
done
echo "sdk_test: pkg-config and CMake builds load and register: OK"
