#!/bin/bash
# Installs the build into a temporary prefix, then builds and runs an
# out-of-tree consumer of the client library twice: with CMake's
# find_package(gnmr) and with pkg-config. Only <gnmr/...> includes, no
# path into the source or build tree. Run by ctest (install_consumer).
#   tests/install/consumer_check.sh <build-dir> <source-dir>
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
if grep -rq "$src\|$build" "$work/prefix/lib/pkgconfig/gnmr.pc"; then
  echo "gnmr.pc names the source or build tree:"; cat "$work/prefix/lib/pkgconfig/gnmr.pc"; exit 1
fi
if [ -e "$work/prefix/include/gnmr/common" ] || [ -e "$work/prefix/include/gnmr/core" ]; then
  echo "project-internal header folders were installed:"; find "$work/prefix/include"; exit 1
fi

echo "== find_package(gnmr)"
cmake -S "$src/tests/install/consumer" -B "$work/cmake-build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/cmake-build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/cmake-build/consumer_cxx"
"$work/cmake-build/consumer_c"

echo "== pkg-config gnmr"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
flags=$(pkg-config --cflags gnmr)
case " $flags " in *"/include/gnmr "*) echo "pkg-config adds -I.../include/gnmr: $flags"; exit 1;; esac
c++ -std=c++17 "$src/tests/install/consumer/consumer.cc" -o "$work/consumer_pc" \
  $flags $(pkg-config --libs gnmr)
"$work/consumer_pc"
echo "install consumer: ok (find_package and pkg-config)"
