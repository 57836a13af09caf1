#!/usr/bin/env bash
# Usage: expect_compile_error.sh PATTERN CONTROL.cpp SNIPPET.cpp COMPILER [ARGS...]
# Passes when CONTROL compiles and SNIPPET fails with an error mentioning PATTERN.
set -u
pattern=$1 control=$2 snippet=$3
shift 3
if ! "$@" -fsyntax-only "$control" 2>/tmp/tenferro-cf-control.$$; then
    echo "control snippet does not compile:"; cat /tmp/tenferro-cf-control.$$; rm -f /tmp/tenferro-cf-control.$$; exit 1
fi
rm -f /tmp/tenferro-cf-control.$$
if out=$("$@" -fsyntax-only "$snippet" 2>&1); then
    echo "FAIL: $snippet compiled, but must not"; exit 1
fi
if ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: $snippet failed for another reason:"; echo "$out"; exit 1
fi
echo "ok: $snippet is rejected ($pattern)"
