#!/usr/bin/env bash
# How subprojects/packagefiles/asio-VERSION.tar.gz, the bundled standalone Asio
# (subprojects/asio.wrap, asio-1.30.2.wrap), is cut from upstream's repository;
# run again, it makes the same bytes, so that the .wrap files' source_hash can
# be checked against upstream:
#
#   subprojects/packagefiles/make-asio-archive.sh GIT_DIR VERSION [OUT_DIR]
#
# GIT_DIR is the git directory of a clone of https://github.com/chriskohlhoff/asio
# (a bare clone, or a work tree's .git) holding the tag asio-MAJOR-MINOR-PATCH
# of VERSION (MAJOR.MINOR.PATCH); nothing is checked out. OUT_DIR defaults to
# this script's folder. The archive holds, under asio-VERSION/, the tag's
# include/ (header-only Asio: all a build needs), LICENSE_1_0.txt and COPYING;
# the repository keeps them under asio/ up to 1.30 (tag asio-1-30-2) and at
# the top from 1.31 (asio-1-38-2). Then, for the same bytes anywhere:
#  * the files' modes as `git archive` writes them (0664, folders 0775; the
#    top folder 0755), whatever the umask;
#  * GNU tar format, entries sorted by name, every mtime 2000-01-01 00:00 UTC,
#    owner and group 0 with no names;
#  * gzip -9 with no name or time stamp (-n).
# Made with GNU tar 1.34 and gzip 1.12 (Debian 12); another gzip may compress
# differently (the tar inside is still the same: compare `zcat | sha256sum`).
# Prints the archive's SHA-256, and whether it is the source_hash of the .wrap
# naming it (a different hash exits 1).
set -euo pipefail

if (($# < 2 || $# > 3)); then
    echo "usage: $0 GIT_DIR VERSION [OUT_DIR]" >&2
    exit 2
fi
git_dir=$1
version=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out_dir=$(cd "${3:-$here}" && pwd)
if [[ ! $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    echo "$0: VERSION is MAJOR.MINOR.PATCH, not '$version'" >&2
    exit 2
fi
tag=asio-${version//./-}
name=asio-$version

git() { command git --git-dir="$git_dir" "$@"; }
if ! git rev-parse --verify --quiet "refs/tags/$tag" >/dev/null; then
    echo "$0: no tag $tag in $git_dir" >&2
    exit 1
fi
# Where the tag keeps the include tree (from 1.31, asio/include is a symbolic
# link to ../include).
if [[ $(git cat-file -t "$tag:asio/include" 2>/dev/null) == tree ]]; then
    base=$tag:asio/
else
    base=$tag:
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/make-asio-archive.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -m 0755 "$tmp/$name"
# The include tree as a tree of its own, so that nothing else of the tag is
# read (a partial clone may lack other blobs); -p: the modes from git
# archive's tar, not from the umask. The two files by content, with the mode
# git archive gives them.
git archive --format=tar --prefix=include/ "${base}include" | tar -x -p -C "$tmp/$name"
for file in LICENSE_1_0.txt COPYING; do
    git cat-file blob "$base$file" >"$tmp/$name/$file"
    chmod 0664 "$tmp/$name/$file"
done
tar -C "$tmp" --format=gnu --sort=name --mtime='2000-01-01 00:00Z' \
    --owner=0 --group=0 --numeric-owner -cf - "$name" | gzip -9n >"$tmp/$name.tar.gz"
mv "$tmp/$name.tar.gz" "$out_dir/$name.tar.gz"

hash=$(sha256sum "$out_dir/$name.tar.gz" | cut -d ' ' -f 1)
echo "$out_dir/$name.tar.gz"
echo "sha256 $hash"
# The .wrap whose source_filename is this archive.
wrap=$(grep -l -x "source_filename = $name.tar.gz" "$here"/../*.wrap 2>/dev/null | head -n 1 || true)
if [[ -z $wrap ]]; then
    echo "no subprojects/*.wrap names $name.tar.gz (new version: add one, with this source_hash)"
    exit 0
fi
wrap_hash=$(sed -n -E 's/^source_hash = ([0-9a-f]+)$/\1/p' "$wrap")
if [[ $hash == "$wrap_hash" ]]; then
    echo "matches the source_hash of subprojects/$(basename "$wrap")"
else
    echo "differs from the source_hash of subprojects/$(basename "$wrap"): $wrap_hash" >&2
    exit 1
fi
