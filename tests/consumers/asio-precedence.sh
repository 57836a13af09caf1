#!/usr/bin/env bash
# The test asio_precedence (meson suite `consumers`): which standalone Asio
# `meson setup` picks (meson.build, "Standalone Asio: the first of"), and what
# the package files then tell consumers (docs/asio-versions.md, "Building
# against your Asio").
#
#   tests/consumers/asio-precedence.sh SOURCE_DIR
#
# Configures SOURCE_DIR in scratch build directories (tests, benchmarks,
# examples, docs disabled; --wrap-mode=nodownload; nothing is compiled) and
# reads the Asio chosen from each one's generated tenferro/asio_build.hpp:
#
#   include     -Dasio_include=<1.30.2's include folder>, with an asio.pc for
#               1.38.2 on PKG_CONFIG_PATH too: 1.30.2 from that folder, which
#               tenferro.pc's Cflags and the CMake package's hints name
#   pkgconfig   PKG_CONFIG_PATH with an asio.pc for 1.30.2 (upstream's
#               asio.pc.in filled in as its `make install` does): 1.30.2 from
#               pkg-config, `Requires: asio = 1.30.2` in tenferro.pc
#   system      nothing given: the system's Asio, when there is one
#   none        nothing given, and the system's Asio hidden (a compiler
#               wrapper whose include path is the compiler's own with the
#               folders holding asio.hpp replaced by copies without it): the
#               bundled 1.38.2, its headers installed under
#               <includedir>/tenferro/bundled, which the package files name
#   forced      --force-fallback-for=asio: the bundled 1.38.2 though the
#               system has one
#   bundled-1.30  --force-fallback-for=asio -Dbundled_asio=1.30.2
#
# Each case then hands its tenferro.pc and CMake package to pkg-config and to
# CMake (consume, below: no library is built) and checks which Asio they
# point a consumer at: the one chosen, before the system's.
#
# The Asio 1.30.2 and 1.38.2 headers come from the bundled archives
# (subprojects/packagefiles/asio-VERSION.tar.gz), extracted into a temporary
# folder. A case that cannot apply here (system: no system Asio; none: a
# system asio.pc) is reported and left out; the test is skipped (77) only if
# meson or a C++ compiler is missing.
set -euo pipefail

if (($# != 1)); then
    echo "usage: $0 SOURCE_DIR" >&2
    exit 2
fi
source=$(cd "$1" && pwd)
cxx=${CXX:-c++}
for tool in meson pkg-config "$cxx"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "asio_precedence: $tool not found; test skipped"
        exit 77
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tenferro-asio-precedence.XXXXXX")
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
unset PKG_CONFIG_PATH CMAKE_PREFIX_PATH CPATH CPLUS_INCLUDE_PATH

for version in 1.30.2 1.38.2; do
    tar -xzf "$source/subprojects/packagefiles/asio-$version.tar.gz" -C "$tmp"
    # Upstream's asio.pc.in as its `make install` fills it in, for a prefix
    # whose include folder is the extracted one.
    mkdir -p "$tmp/pc-$version"
    cat >"$tmp/pc-$version/asio.pc" <<EOF
prefix=$tmp/asio-$version
exec_prefix=\${prefix}
includedir=\${prefix}/include

Name: asio
Description: A cross-platform C++ library for network and low-level I/O programming that provides developers with a consistent asynchronous model using a modern C++ approach.
Version: $version
Cflags: -I\${includedir}
Lflags:
Requires:
Requires.private:
EOF
done

failures=0
fail() {
    echo "asio_precedence: $case_name: $*"
    failures=$((failures + 1))
}

# setup NAME [ENV=VALUE...] -- [MESON ARGS...]: configures $tmp/NAME; sets
# build, chosen (the version string) and origin.
setup() {
    case_name=$1
    shift
    local env=()
    while [[ $1 != -- ]]; do
        env+=("$1")
        shift
    done
    shift
    build=$tmp/build-$case_name
    echo "==> $case_name: ${env[*]:+${env[*]} }meson setup $*"
    if ! env "${env[@]}" meson setup "$build" "$source" --wrap-mode=nodownload \
        -Dtests=disabled -Dbenchmarks=disabled -Dexamples=disabled -Ddocs=disabled \
        "$@" >"$tmp/$case_name.log" 2>&1; then
        cat "$tmp/$case_name.log"
        fail "meson setup failed"
        chosen='' origin=''
        return 1
    fi
    local header=$build/include/tenferro/asio_build.hpp
    chosen=$(sed -n -E 's/^#define TENFERRO_BUILT_ASIO_VERSION_STRING "(.*)"$/\1/p' "$header")
    origin=$(sed -n -E 's/^#define TENFERRO_BUILT_ASIO_ORIGIN "(.*)"$/\1/p' "$header")
    echo "    Asio $chosen from $origin"
}

# expect VERSION ORIGIN: what setup chose.
expect() {
    if [[ $chosen != "$1" || $origin != "$2" ]]; then
        fail "expected Asio $1 from $2, got '$chosen' from '$origin'"
    fi
}

# pc_has / pc_lacks LINE-REGEX: the generated tenferro.pc.
pc_has() {
    grep -q -E -- "$1" "$build/meson-private/tenferro.pc" ||
        fail "tenferro.pc has no line matching '$1':$(printf '\n%s' "$(cat "$build/meson-private/tenferro.pc")")"
}
pc_lacks() {
    if grep -q -E -- "$1" "$build/meson-private/tenferro.pc"; then
        fail "tenferro.pc has a line matching '$1'"
    fi
}
# cmake_has STRING: the generated CMake package file.
cmake_has() {
    grep -q -F -- "$1" "$build/tenferroConfig.cmake" ||
        fail "tenferroConfig.cmake has no '$1'"
}
# installs_bundled yes|no: whether meson install would put Asio's headers
# under <includedir>/tenferro/bundled.
installs_bundled() {
    local n
    n=$(meson introspect "$build" --installed | grep -c '/tenferro/bundled/asio' || true)
    if [[ $1 == yes && $n -eq 0 ]]; then
        fail "installs no Asio headers under <includedir>/tenferro/bundled"
    elif [[ $1 == no && $n -ne 0 ]]; then
        fail "installs Asio headers under <includedir>/tenferro/bundled"
    fi
}

# The Asio a consumer gets from the package files, without building the
# library: tenferro.pc and the CMake package copied into a scratch prefix
# (<libdir>/pkgconfig, <libdir>/cmake/tenferro: they locate the prefix from
# there), with an empty asio.hpp where the bundled one would be installed.
# `pkg-config --cflags tenferro` and a CMake project's find_package(tenferro)
# give include folders; the first of them (then the compiler's own) that holds
# asio.hpp must be EXPECTED (`bundled`: the bundled folder in the scratch
# prefix). consume [PKG_CONFIG_PATH=DIR] EXPECTED: DIR as the consumer's.
consume() {
    local pc_path="" expected prefix libdir out dirs found
    if [[ $1 == PKG_CONFIG_PATH=* ]]; then
        pc_path=${1#PKG_CONFIG_PATH=}
        shift
    fi
    expected=$1
    prefix=$tmp/prefix-$case_name
    libdir=$(meson introspect "$build" --buildoptions | python3 -c 'import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"))')
    mkdir -p "$prefix/$libdir/pkgconfig" "$prefix/$libdir/cmake/tenferro" \
        "$prefix/include/tenferro/bundled"
    : >"$prefix/include/tenferro/bundled/asio.hpp"
    cp "$build/meson-private/tenferro.pc" "$prefix/$libdir/pkgconfig/"
    cp "$build/tenferroConfig.cmake" "$build/tenferroConfigVersion.cmake" \
        "$prefix/$libdir/cmake/tenferro/"
    if [[ $expected == bundled ]]; then
        expected=$prefix/include/tenferro/bundled
    fi
    expected=$(realpath "$expected")

    if ! out=$(PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig${pc_path:+:$pc_path}" \
        pkg-config --cflags-only-I tenferro 2>&1); then
        fail "pkg-config --cflags tenferro: $out"
    else
        read -r -a dirs <<<"${out//-I/}"
        found=$(first_asio_dir "${dirs[@]}")
        echo "    pkg-config: Asio from $found"
        [[ $found == "$expected" ]] || fail "pkg-config: expected Asio from $expected"
    fi

    if ! command -v cmake >/dev/null 2>&1; then
        echo "    CMake: not checked (cmake not found)"
        return
    fi
    mkdir -p "$tmp/cmake-$case_name"
    # shellcheck disable=SC2016 # ${includes} is CMake's.
    printf '%s\n' 'cmake_minimum_required(VERSION 3.16)' \
        'project(tenferro_asio_precedence LANGUAGES CXX)' \
        'find_package(tenferro CONFIG REQUIRED)' \
        'get_target_property(includes tenferro::tenferro INTERFACE_INCLUDE_DIRECTORIES)' \
        'message(STATUS "tenferro-includes=${includes}")' >"$tmp/cmake-$case_name/CMakeLists.txt"
    if ! out=$(env ${pc_path:+PKG_CONFIG_PATH="$pc_path"} cmake -S "$tmp/cmake-$case_name" \
        -B "$tmp/cmake-$case_name/build" -DCMAKE_PREFIX_PATH="$prefix" 2>&1); then
        fail "cmake: $out"
    else
        IFS=';' read -r -a dirs <<<"$(sed -n 's/^-- tenferro-includes=//p' <<<"$out")"
        found=$(first_asio_dir "${dirs[@]}")
        echo "    CMake: Asio from $found"
        [[ $found == "$expected" ]] || fail "CMake: expected Asio from $expected"
    fi
}

# The first folder of "$@", then of the compiler's include path, that holds
# asio.hpp (resolved), or `none`.
first_asio_dir() {
    local dir
    for dir in "$@" "${default_includes[@]}"; do
        if [[ -e $dir/asio.hpp ]]; then
            realpath "$dir"
            return
        fi
    done
    echo none
}

# The compiler's own include path; the folders of it that hold asio.hpp.
mapfile -t default_includes < <("$cxx" -x c++ -E -v - </dev/null 2>&1 |
    sed -n '/^#include <...> search starts here:$/,/^End of search list\.$/p' | sed -n 's/^ //p')
system_asio_dirs=()
for dir in "${default_includes[@]}"; do
    if [[ -e $dir/asio.hpp ]]; then
        system_asio_dirs+=("$dir")
    fi
done
system_pc=no
if pkg-config --exists asio; then
    system_pc=yes
fi

# 1. -Dasio_include wins over pkg-config (and the system).
if setup include PKG_CONFIG_PATH="$tmp/pc-1.38.2" -- -Dasio_include="$tmp/asio-1.30.2/include"; then
    expect 1.30.2 "$tmp/asio-1.30.2/include"
    pc_has "^Cflags: .*-I$tmp/asio-1.30.2/include( |$)"
    pc_lacks '^Requires: .*asio'
    cmake_has "set(_tenferro_asio_hints \"$tmp/asio-1.30.2/include\")"
    cmake_has 'set(_tenferro_asio_bundled 0)'
    installs_bundled no
    consume "$tmp/asio-1.30.2/include"
fi

# 2. pkg-config asio wins over the system.
if setup pkgconfig PKG_CONFIG_PATH="$tmp/pc-1.30.2" --; then
    expect 1.30.2 'pkg-config asio'
    pc_has '^Requires: asio = 1\.30\.2$'
    cmake_has 'set(_tenferro_asio_pkgconfig 1)'
    cmake_has "set(_tenferro_asio_hints \"$tmp/asio-1.30.2/include\")"
    installs_bundled no
    consume PKG_CONFIG_PATH="$tmp/pc-1.30.2" "$tmp/asio-1.30.2/include"
fi

# 3. The system's, when nothing else is given.
if ((${#system_asio_dirs[@]} == 0)); then
    echo "==> system: left out (no asio.hpp on $cxx's include path)"
elif [[ $system_pc == yes ]]; then
    echo "==> system: left out (pkg-config finds an asio.pc, which comes first)"
elif setup system --; then
    system_version=$(printf '#include <asio/version.hpp>\nASIO_VERSION\n' |
        "$cxx" -x c++ -E -P - | tail -n 1)
    expect "$((system_version / 100000)).$((system_version / 100 % 1000)).$((system_version % 100))" 'the system'
    pc_has '^Cflags: -I\$\{includedir\}( |$)'
    pc_lacks '^Requires: .*asio'
    cmake_has 'set(_tenferro_asio_hints )'
    installs_bundled no
    consume "${system_asio_dirs[0]}"
fi

# 4. Nothing found: the bundled one. The system's Asio hidden by a compiler
# wrapper whose include path is the compiler's with each folder holding
# asio.hpp replaced by a folder of links to all else in it.
if [[ $system_pc == yes ]]; then
    echo "==> none: left out (pkg-config finds an asio.pc, which cannot be hidden here)"
else
    wrapper_args=(-nostdinc)
    for dir in "${default_includes[@]}"; do
        if [[ -e $dir/asio.hpp ]]; then
            shadow=$tmp/shadow$dir
            mkdir -p "$shadow"
            for entry in "$dir"/*; do
                case ${entry##*/} in
                    asio | asio.hpp) ;;
                    *) ln -s "$entry" "$shadow/" ;;
                esac
            done
            dir=$shadow
        fi
        wrapper_args+=(-isystem "$dir")
    done
    cxx_path=$(command -v "$cxx")
    {
        echo '#!/bin/sh'
        printf 'exec %q' "$cxx_path"
        printf ' %q' "${wrapper_args[@]}"
        echo ' "$@"'
    } >"$tmp/cxx-without-asio"
    chmod +x "$tmp/cxx-without-asio"
    if printf '#include <asio.hpp>\n' | "$tmp/cxx-without-asio" -x c++ -fsyntax-only - 2>/dev/null; then
        fail "the wrapper does not hide the system's asio.hpp"
    elif setup none CXX="$tmp/cxx-without-asio" --; then
        expect 1.38.2 'bundled (subprojects/)'
        pc_has '^Cflags: -I\$\{includedir\}/tenferro/bundled -I\$\{includedir\}( |$)'
        pc_lacks '^Requires: .*asio'
        cmake_has 'set(_tenferro_asio_bundled 1)'
        installs_bundled yes
        consume bundled
    fi
fi

# 5. --force-fallback-for=asio: the bundled one though others are found.
if setup forced PKG_CONFIG_PATH="$tmp/pc-1.30.2" -- --force-fallback-for=asio; then
    expect 1.38.2 'bundled (subprojects/)'
    pc_has '^Cflags: -I\$\{includedir\}/tenferro/bundled -I\$\{includedir\}( |$)'
    pc_lacks '^Requires: .*asio'
    cmake_has 'set(_tenferro_asio_bundled 1)'
    installs_bundled yes
    consume PKG_CONFIG_PATH="$tmp/pc-1.30.2" bundled
fi
if setup bundled-1.30 -- --force-fallback-for=asio -Dbundled_asio=1.30.2; then
    expect 1.30.2 'bundled (subprojects/)'
    pc_has '^Cflags: -I\$\{includedir\}/tenferro/bundled -I\$\{includedir\}( |$)'
    installs_bundled yes
    consume bundled
fi

if ((failures > 0)); then
    echo "asio_precedence: $failures failure(s)"
    exit 1
fi
echo "asio_precedence: ok"
