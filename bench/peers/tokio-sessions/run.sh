#!/usr/bin/env bash
# Builds (once) and runs the tokio peer of the session-admission benchmark.
# Usage: run.sh [--workload roundtrip|fanin|dot] [--mode spawn_blocking|inline]
#               [--permits P] [--clients C] [--ops M] [--io-threads T] [--vec N]
# Prints one JSON line (docs/bench-protocol.md).
# Needs Debian's cargo and librust-tokio-dev (installed on demand); works offline.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${TOKIO_PEER_BUILD:-${TMPDIR:-/tmp}/tenferro-tokio-peer}"
if ! ls /usr/share/cargo/registry/tokio-1.* >/dev/null 2>&1 || ! command -v cargo >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq cargo librust-tokio-dev >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null && apt-get install -y -qq cargo librust-tokio-dev >/dev/null; }
fi
mkdir -p "$build/src" "$build/.cargo"
cp "$here/Cargo.toml" "$build/"
cp "$here/src/main.rs" "$build/src/"
cat >"$build/.cargo/config.toml" <<'CFG'
[source.crates-io]
replace-with = "debian"
[source.debian]
directory = "/usr/share/cargo/registry"
[net]
offline = true
CFG
(cd "$build" && cargo build --release -q 2>/dev/null || cargo build --release)
exec "$build/target/release/tokio_sessions" "$@"
