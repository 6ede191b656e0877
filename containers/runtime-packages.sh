#!/bin/sh
# runtime-packages.sh PREFIX -- the distribution packages that provide the shared libraries the
# programs and libraries under PREFIX load, one per line, sorted: what the run-time stage of an
# image installs beside its base packages (containers/images.yaml). Runs in the builder stage, on
# Debian or Ubuntu (ldd, dpkg). Libraries under PREFIX itself need no package; a library that
# ldd cannot find, or that no package owns, is an error naming it.
set -eu
if [ "$#" -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 PREFIX (an install prefix)" >&2
    exit 2
fi
PREFIX=$(cd "$1" && pwd)
libs=$(mktemp)
owners=$(mktemp)
trap 'rm -f "$libs" "$owners"' EXIT
find "$PREFIX" -type f \( -perm -u+x -o -name '*.so' -o -name '*.so.*' \) | sort | while read -r f; do
    # Not every file is a dynamic ELF object: ldd says so and exits 1.
    out=$(ldd "$f" 2>/dev/null) || continue
    if printf '%s\n' "$out" | grep -q 'not found'; then
        echo "runtime-packages.sh: $f: $(printf '%s\n' "$out" | grep 'not found' | head -1 | sed 's/^[[:space:]]*//')" >&2
        exit 1
    fi
    printf '%s\n' "$out" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done > "$libs"
sort -u "$libs" | while read -r lib; do
    case "$lib" in "$PREFIX"/*) continue ;; esac
    # dpkg knows a file by the path its package ships it under (/lib or /usr/lib on merged-/usr systems).
    owner=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null \
            || dpkg -S "/usr$lib" 2>/dev/null || dpkg -S "${lib#/usr}" 2>/dev/null) || {
        echo "runtime-packages.sh: $lib: no package owns it" >&2
        exit 1
    }
    printf '%s\n' "$owner" | head -1 | cut -d: -f1
done > "$owners"
sort -u "$owners"
