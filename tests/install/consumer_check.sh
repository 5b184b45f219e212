#!/bin/bash
# Installs the build into a temporary prefix, then builds and runs an
# out-of-tree consumer of the client library twice: with CMake's
# find_package(gnmr) and with pkg-config. Only <gnmr/...> includes, no
# path into the source or build tree. Run by ctest (install_consumer).
# With GNMR_SHARED (third argument ON) the consumers must link the shared
# libgnmr_client.so, and the shared libraries must export gnmr symbols only.
#   tests/install/consumer_check.sh <build-dir> <source-dir> [<GNMR_SHARED>]
set -euo pipefail
build=$1
src=$2
shared=${3:-OFF}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
if grep -rq "$src\|$build" "$work/prefix/lib/pkgconfig/gnmr.pc"; then
  echo "gnmr.pc names the source or build tree:"; cat "$work/prefix/lib/pkgconfig/gnmr.pc"; exit 1
fi
if [ -e "$work/prefix/include/gnmr/common" ] || [ -e "$work/prefix/include/gnmr/core" ]; then
  echo "project-internal header folders were installed:"; find "$work/prefix/include"; exit 1
fi

if [ "$shared" = ON ]; then
  echo "== exported symbols"
  for lib in libgnmr_client.so libgnmr_client_local.so; do
    # Defined dynamic symbols, demangled; the ones not of gnmr are errors.
    nm -D --defined-only "$work/prefix/lib/$lib" | awk '{ $1 = $2 = ""; sub(/^  /, ""); print }' \
      | c++filt >"$work/$lib.syms"
    grep -Ev '^(gnmr_[a-z_]+|gnmr::.*|(typeinfo|typeinfo name|vtable) for gnmr::.*)$' \
      "$work/$lib.syms" >"$work/$lib.other" || true
    if [ -s "$work/$lib.other" ]; then
      echo "$lib exports symbols outside the gnmr API:"; head -50 "$work/$lib.other"; exit 1
    fi
    echo "$lib: $(wc -l <"$work/$lib.syms") symbols, all gnmr"
  done
fi

echo "== find_package(gnmr)"
cmake -S "$src/tests/install/consumer" -B "$work/cmake-build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/cmake-build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/cmake-build/consumer_cxx"
"$work/cmake-build/consumer_c"
"$work/cmake-build/consumer_local"
if [ "$shared" = ON ]; then
  for exe in consumer_cxx consumer_c consumer_local; do
    readelf -d "$work/cmake-build/$exe" | grep -q 'NEEDED.*libgnmr_client' \
      || { echo "$exe does not link libgnmr_client.so"; exit 1; }
  done
fi

echo "== pkg-config gnmr"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
flags=$(pkg-config --cflags gnmr)
case " $flags " in *"/include/gnmr "*) echo "pkg-config adds -I.../include/gnmr: $flags"; exit 1;; esac
c++ -std=c++17 "$src/tests/install/consumer/consumer.cc" -o "$work/consumer_pc" \
  $flags $(pkg-config --libs gnmr)
if [ "$shared" = ON ]; then
  readelf -d "$work/consumer_pc" | grep -q 'NEEDED.*libgnmr_client\.so' \
    || { echo "consumer_pc does not link libgnmr_client.so"; exit 1; }
  export LD_LIBRARY_PATH="$work/prefix/lib"
fi
"$work/consumer_pc"
echo "install consumer: ok (find_package and pkg-config)"
