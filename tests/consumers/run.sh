#!/usr/bin/env bash
# The consumers tests (meson suite `consumers`): does tenferro work for a
# project that uses it the way users do?
#
#   tests/consumers/run.sh KIND BUILD_DIR SOURCE_DIR
#
# KIND is one of
#   cmake             find_package(tenferro CONFIG) and tenferro::tenferro
#                     (tests/consumers/cmake/)
#   meson_dependency  dependency('tenferro') through the installed .pc
#                     (tests/consumers/meson_dependency/)
#   pkgconfig         c++ $(pkg-config --cflags --libs tenferro)
#                     (tests/consumers/pkgconfig/build.sh)
#   meson_subproject  tenferro as a Meson subproject of another project
#                     (tests/consumers/meson_subproject/)
#   relocated         the installed programs run from the install prefix with
#                     no LD_LIBRARY_PATH, and load the library from there
#   asio_mismatch     main.cpp compiled through the .pc (as pkgconfig does) but
#                     with another Asio's include folder first must fail with
#                     include/tenferro/asio.hpp's static_assert, naming both
#                     versions (asio_version<LIBRARY, PROGRAM>); the other Asio
#                     is the system's when its version differs from the
#                     build's, else one of the bundled archives
#                     (subprojects/packagefiles/). Standalone Asio only
#   asio_no_deprecated  the installed library exports nothing of the Asio
#                     types whose layout ASIO_NO_DEPRECATED changes
#                     (io_context::service, which has two more virtual
#                     functions without it before Asio 1.31, and the services
#                     derived from it): what makes the macro optional for
#                     consumers (docs/asio-versions.md, "Building against your
#                     Asio")
#
# Each consumer builds tests/consumers/main.cpp (one session, its value
# checked) in a scratch copy and runs it. For a build of the Boost.Asio flavour
# (-Dasio=boost) the copies are edited to use that flavour's names: the
# package tenferro-boost (CMake target tenferro::tenferro-boost), and
# -Dasio=boost for the subproject (docs/boost-asio.md).
#
# How the install is made: `meson install --no-rebuild --destdir TMP` of
# BUILD_DIR as configured (prefix /usr/local by default), so the tree lands in
# TMP/usr/local, not in the prefix the build was configured for, and nothing
# is rebuilt. That copy is a *relocated* installation, and the consumers use it
# as such (PKG_CONFIG_PATH, CMAKE_PREFIX_PATH point at it): which is valid
# because the installed files locate everything relative to themselves (the
# .pc through pkgconfig.relocatable: prefix=${pcfiledir}/../../..; the CMake
# package through PACKAGE_PREFIX_DIR, from the config file's own directory;
# the programs through their $ORIGIN rpath). A file that still named the
# configured prefix would send the consumer to /usr/local (usually empty: a
# failure) — so these tests check relocatability too. Configuring a second
# build with --prefix=TMP would be the other way, at the cost of a rebuild.
#
# meson_subproject builds only the consumer's own object file by default (the
# configuration of tenferro as a subproject, its dependency object, include
# paths and compile arguments are then all exercised), since building the
# library again, even unoptimised (buildtype plain), takes ~2 CPU-minutes
# (measured: 112 s with ninja -j 1 on a 2-core machine), as much as the
# whole suite otherwise; TENFERRO_CONSUMERS_FULL=1 builds, links and runs it
# as the other kinds do.
#
# Exits 77 (meson: skipped) when the tool a kind needs (cmake, pkg-config) is
# not installed, or the kind does not apply to the build (asio_mismatch on the
# Boost flavour).
set -euo pipefail

if (($# != 3)); then
    echo "usage: $0 KIND BUILD_DIR SOURCE_DIR" >&2
    exit 2
fi
kind=$1
build=$(cd "$2" && pwd)
source=$(cd "$3" && pwd)
here=$source/tests/consumers

need() {
    if ! command -v "$1" >/dev/null 2>&1; then
        echo "consumers: $1 not found; test skipped (Debian: apt-get install $2)"
        exit 77
    fi
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tenferro-consumer-$kind.XXXXXX")
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT

# The consumer sees a clean environment: nothing from the caller that could
# find a library elsewhere.
unset LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH

# The build's Asio flavour decides the names the consumers use.
build_option() {
    meson introspect "$build" --buildoptions | python3 -c 'import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]))' "$1"
}
asio=$(build_option asio)
if [[ $asio == boost ]]; then
    package=tenferro-boost
else
    package=tenferro
fi

# A scratch copy of consumer project $1 with main.cpp, in $tmp/src; for the
# Boost flavour with the package, target and subproject option renamed.
copy_project() {
    mkdir -p "$tmp/src"
    cp -R "$here/$1/." "$tmp/src/"
    cp "$here/main.cpp" "$tmp/src/"
    if [[ $asio == boost ]]; then
        sed -i -E -e 's/find_package\(tenferro /find_package(tenferro-boost /' \
            -e 's/tenferro::tenferro\)/tenferro::tenferro-boost)/' \
            -e "s/dependency\('tenferro'/dependency('tenferro-boost'/" \
            -e "s/'examples=disabled'\]/'examples=disabled', 'asio=boost']/" \
            -e 's/^package=tenferro$/package=tenferro-boost/' \
            "$tmp/src"/*
    fi
}

# The pkg-config kinds need a relocatable .pc (see tests/consumers/meson.build).
need_relocatable_pc() {
    if [[ ${TENFERRO_PC_RELOCATABLE:-1} != 1 ]]; then
        echo "consumers: $build is configured with pkgconfig.relocatable=false, so its" \
            ".pc names the configured prefix; test skipped (meson configure $build" \
            "-Dpkgconfig.relocatable=true)"
        exit 77
    fi
}

# meson install into $tmp/root; sets prefix and libdir (absolute, in $tmp).
install_tree() {
    local opts configured_prefix configured_libdir
    opts=$(meson introspect "$build" --buildoptions)
    configured_prefix=$(python3 -c 'import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))' <<<"$opts")
    configured_libdir=$(python3 -c 'import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"))' <<<"$opts")
    echo "==> meson install -C $build --no-rebuild --destdir $tmp/root (prefix $configured_prefix)"
    meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >"$tmp/install.log" 2>&1 || {
        cat "$tmp/install.log"
        return 1
    }
    prefix=$tmp/root$configured_prefix
    case $configured_libdir in
        /*) libdir=$tmp/root$configured_libdir ;;
        *) libdir=$prefix/$configured_libdir ;;
    esac
}

# Runs program $1 (arguments: $3...) after checking that it loads libtenferro
# from directory $2.
run_checked() {
    local program=$1 want loaded
    want=$(realpath "$2")
    loaded=$(ldd "$program" | sed -n -E 's/^\s*libtenferro(-boost)?\.so[.0-9]* => (\S+).*/\2/p')
    if [[ -n $loaded ]]; then
        loaded=$(realpath "$loaded")
    fi
    if [[ $loaded != "$want"/* ]]; then
        echo "consumers: $program loads libtenferro from '${loaded:-nowhere}', not from $want"
        ldd "$program"
        return 1
    fi
    echo "==> $program${3:+ ${*:3}} (libtenferro from $loaded)"
    "$program" "${@:3}"
}

start=$SECONDS
case $kind in
    cmake)
        need cmake cmake
        install_tree
        copy_project cmake
        echo "==> cmake with CMAKE_PREFIX_PATH=$prefix"
        cmake -S "$tmp/src" -B "$tmp/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
            -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
        found=$(sed -n -E "s/^${package}_DIR:PATH=(.*)/\\1/p" "$tmp/build/CMakeCache.txt")
        if [[ $found != "$prefix"/* ]]; then
            echo "consumers: CMake found tenferro in '$found', not under $prefix"
            exit 1
        fi
        cmake --build "$tmp/build"
        run_checked "$tmp/build/consumer" "$libdir"
        ;;
    meson_dependency)
        need pkg-config pkg-config
        need_relocatable_pc
        install_tree
        copy_project meson_dependency
        echo "==> meson setup with PKG_CONFIG_PATH=$libdir/pkgconfig"
        PKG_CONFIG_PATH=$libdir/pkgconfig meson setup "$tmp/build" "$tmp/src" --buildtype=plain
        ninja -C "$tmp/build"
        run_checked "$tmp/build/consumer" "$libdir"
        ;;
    pkgconfig)
        need pkg-config pkg-config
        need_relocatable_pc
        install_tree
        copy_project pkgconfig
        echo "==> PKG_CONFIG_PATH=$libdir/pkgconfig ./build.sh"
        echo "    cflags: $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags $package)"
        echo "    libs:   $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --libs $package)"
        (cd "$tmp/src" && PKG_CONFIG_PATH=$libdir/pkgconfig ./build.sh)
        run_checked "$tmp/src/consumer" "$libdir"
        ;;
    meson_subproject)
        copy_project meson_subproject
        mkdir -p "$tmp/src/subprojects"
        ln -s "$source" "$tmp/src/subprojects/tenferro"
        echo "==> meson setup (tenferro as subprojects/tenferro -> $source)"
        # --force-fallback-for: the subproject even where a tenferro is installed.
        meson setup "$tmp/build" "$tmp/src" --buildtype=plain --wrap-mode=nodownload \
            --force-fallback-for=tenferro
        if [[ ${TENFERRO_CONSUMERS_FULL:-0} == 1 ]]; then
            ninja -C "$tmp/build"
            run_checked "$tmp/build/consumer" "$tmp/build/subprojects/tenferro"
        else
            # The consumer's object only (see the top of this file).
            ninja -C "$tmp/build" consumer.p/main.cpp.o
            echo "consumers: main.cpp compiled against the subproject; library build, link and" \
                "run skipped (TENFERRO_CONSUMERS_FULL=1 does them)"
        fi
        ;;
    relocated)
        install_tree
        ran=0
        # Each program with tiny arguments: the benchmark runs a few sessions
        # through the library; the server only parses its command line.
        for entry in "tenferro-bench-admission --permits 1 --clients 2 --ops 200" "tenferro-search --help"; do
            read -r -a args <<<"$entry"
            program=$prefix/bin/${args[0]}
            if [[ ! -x $program ]]; then
                echo "consumers: $program not installed (not built in this configuration)"
                continue
            fi
            echo "==> ${args[0]}: RUNPATH" \
                "$(readelf -d "$program" | sed -n -E 's/.*\((RUNPATH|RPATH)\).*\[(.*)\]/\2/p')"
            run_checked "$program" "$libdir" "${args[@]:1}"
            ran=$((ran + 1))
        done
        if ((ran == 0)); then
            echo "consumers: no installed program to run; skipped"
            exit 77
        fi
        ;;
    asio_mismatch)
        need pkg-config pkg-config
        need_relocatable_pc
        if [[ $asio == boost ]]; then
            echo "consumers: asio_mismatch is for standalone Asio; test skipped"
            exit 77
        fi
        install_tree
        copy_project pkgconfig
        export PKG_CONFIG_PATH=$libdir/pkgconfig
        read -r -a cflags <<<"$(pkg-config --cflags $package)"
        compile=("${CXX:-c++}" -std=c++20 -fsyntax-only)
        built=$(sed -n -E 's/^#define TENFERRO_BUILT_ASIO_VERSION ([0-9]+)$/\1/p' \
            "$(pkg-config --variable=includedir $package)/tenferro/asio_build.hpp")
        echo "==> the library was built with ASIO_VERSION $built"
        # ASIO_VERSION as seen with the include folders $@.
        asio_version_with() {
            printf '#include <asio/version.hpp>\nASIO_VERSION\n' |
                "${compile[@]:0:2}" -x c++ -E -P "$@" - 2>/dev/null | tail -n 1
        }
        # The other Asio, in a folder of its own (a system folder given with -I
        # would keep its place after the others, GCC's rule).
        other=
        mkdir -p "$tmp/other"
        system_header=$(printf '#include <asio/version.hpp>\n' |
            "${compile[@]}" -x c++ -H - 2>&1 >/dev/null |
            sed -n -E 's|^\.+ (.*/asio/version\.hpp)$|\1|p' | head -n 1)
        if [[ -n $system_header ]]; then
            system_include=$(dirname "$(dirname "$system_header")")
            if [[ $(asio_version_with) != "$built" ]]; then
                mkdir -p "$tmp/other/system"
                ln -s "$system_include/asio" "$system_include/asio.hpp" "$tmp/other/system/"
                other=$tmp/other/system
                echo "==> the other Asio: the system's, in $system_include"
            fi
        fi
        if [[ -z $other ]]; then
            for archive in "$source"/subprojects/packagefiles/asio-*.tar.gz; do
                tar -xzf "$archive" -C "$tmp/other"
                candidate=$tmp/other/$(basename "$archive" .tar.gz)/include
                if [[ $(asio_version_with -I"$candidate") != "$built" ]]; then
                    other=$candidate
                    echo "==> the other Asio: $(basename "$archive") (no system Asio of another version)"
                    break
                fi
            done
        fi
        if [[ -z $other ]]; then
            echo "consumers: no Asio of a version other than $built found"
            exit 1
        fi
        program=$(asio_version_with -I"$other")
        echo "==> control: main.cpp against the package's own Asio"
        (cd "$tmp/src" && "${compile[@]}" "${cflags[@]}" main.cpp)
        echo "==> main.cpp with ASIO_VERSION $program first: must fail"
        if out=$(cd "$tmp/src" && "${compile[@]}" -I"$other" "${cflags[@]}" main.cpp 2>&1); then
            echo "consumers: main.cpp compiled against Asio $program with a library built with $built"
            exit 1
        fi
        want="asio_version<$built, $program>"
        if ! grep -q -F -- "$want" <<<"$out" ||
            ! grep -q -F -- "tenferro was built against another Asio" <<<"$out"; then
            echo "consumers: the compiler failed, but without the static_assert naming $want:"
            echo "$out"
            exit 1
        fi
        grep -F -e "$want" -e "static assertion failed" -e "static_assert failed" <<<"$out" | head -n 4
        ;;
    asio_no_deprecated)
        need nm binutils
        install_tree
        library=$(find "$libdir" -maxdepth 1 -name "lib$package.so.*.*.*" | head -n 1)
        if [[ -z $library ]]; then
            echo "consumers: lib$package.so.X.Y.Z not installed in $libdir"
            exit 1
        fi
        echo "==> nm -DC $library"
        found=$(nm -DC "$library" |
            grep -E 'asio::io_context::service\b|asio::detail::service_base<|asio::detail::strand_service\b' || true)
        if [[ -n $found ]]; then
            echo "consumers: the library uses Asio types whose layout ASIO_NO_DEPRECATED changes:"
            echo "$found" | head -n 20
            exit 1
        fi
        echo "    no io_context::service, service_base<> or strand_service"
        ;;
    *)
        echo "consumers: unknown kind '$kind'" >&2
        exit 2
        ;;
esac
echo "consumers: $kind ok ($((SECONDS - start)) s)"
