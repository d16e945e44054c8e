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

# 5. A C++ module on the installed toolkit (devplug::module_common).
[[ -f $work/prefix/include/devplug/common/cxx_module.h ]] || fail "cxx_module.h not installed"
mkdir -p "$work/widget"
cat > "$work/widget/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(widget LANGUAGES CXX)
find_package(devplug-module 1 CONFIG REQUIRED)
devplug_add_module(widget widget.cc)
target_link_libraries(widget PRIVATE devplug::module_common)
CM
cat > "$work/widget/widget.cc" <<'CC'
#include <memory>
#include <string>

#include "devplug/common/cxx_module.h"

namespace {

using devplug::common::DeviceSink;
using devplug::common::Host;
using devplug::common::Instance;

class Widget : public Instance {
 public:
  Widget(Host host, int64_t count) : Instance(host), count_(count) {}
  void ListDevices(DeviceSink& sink) override {
    for (int64_t i = 0; i < count_; ++i)
      if (auto r = sink.Add("w" + std::to_string(i), true, -1))
        r->Node("/dev/null", "/dev/widget-" + std::to_string(i));
  }

 private:
  const int64_t count_;
};

std::unique_ptr<Instance> Create(Host& host) {
  const int64_t count = host.Int("count").value_or(1);
  if (count < 1 || count > 64) {
    host.ConfigError("count", "must be between 1 and 64");
    return nullptr;
  }
  return std::make_unique<Widget>(host, count);
}

const devplug_config_key kKeys[] = {{"count", DEVPLUG_CONFIG_INT, 0, "how many widgets"},
                                    {nullptr, 0, 0, nullptr}};
const char* const kNoSubsystems[] = {nullptr};

}  // namespace

DEVPLUG_CXX_MODULE(widget_module, "widget", "1.0.0", "widgets, to test the SDK", kKeys,
                   kNoSubsystems, Create, 0)
CC
# A sanitizer build installs a sanitized toolkit: the vendor's module is
# built the same way, as it would have to be: the same compiler (clang's
# runtime lives in devplugd, GCC's in a shared library each module would
# load beside it) and the same sanitizers (DEVPLUG_SANITIZE tells the
# module helper that the runtime's symbols come at load time).
san=$(sed -n 's/^DEVPLUG_SANITIZE:[A-Z]*=//p' "$build/CMakeCache.txt")
san_flags=()
if [[ -n $san ]]; then
  cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
  san_flags=(-DCMAKE_CXX_COMPILER="$cxx" -DDEVPLUG_SANITIZE="$san"
             -DCMAKE_CXX_FLAGS="-fsanitize=$san" -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=$san")
fi
cmake -S "$work/widget" -B "$work/widget/b" -DCMAKE_PREFIX_PATH="$work/prefix" "${san_flags[@]}" \
  >/dev/null
cmake --build "$work/widget/b" >/dev/null || fail "the C++ module does not build"
exported=$(nm -D --defined-only "$work/widget/b/widget.so" | awk '$2 == "T" {print $3}')
[[ $exported == devplug_module_entry_v1 ]] || fail "C++ module exports: $exported"
cat > "$work/widget.toml" <<TOML
[[resource]]
name = "example.com/widget"
module = "$work/widget/b/widget.so"
count = 2
TOML
out=$("$ctl" demo --config "$work/widget.toml" 2>&1) || { echo "$out"; fail "demo with widget.so"; }
grep -q "example.com/widget .* 2 *2" <<<"$out" || { echo "$out"; fail "devices of widget.so"; }
grep -q '"container_path": "/dev/widget-0"' <<<"$out" || { echo "$out"; fail "Allocate of widget.so"; }
echo "sdk_test: pkg-config, CMake and C++ toolkit builds load and register: OK"
