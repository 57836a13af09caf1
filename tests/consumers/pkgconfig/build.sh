#!/usr/bin/env bash
# A plain compiler command line using an installed tenferro through pkg-config
# (tests/consumers/run.sh sets PKG_CONFIG_PATH to the prefix's and runs this in
# a scratch copy holding main.cpp). The .pc file carries the include and
# library paths; the C++ standard is the consumer's choice, so -std=c++20 is
# given here. The rpath lets the program find libtenferro without
# LD_LIBRARY_PATH.
set -euo pipefail
# tenferro-boost for the Boost.Asio flavour (tests/consumers/run.sh edits this).
package=tenferro
libdir=$(pkg-config --variable=libdir $package)
# Word-splitting of pkg-config's output is intended.
# shellcheck disable=SC2046
"${CXX:-c++}" -std=c++20 main.cpp $(pkg-config --cflags $package) \
    $(pkg-config --libs $package) "-Wl,-rpath,$libdir" -o consumer
