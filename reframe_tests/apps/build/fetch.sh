#!/bin/sh
# fetch.sh APP DEST -- fetch the pinned upstream source of APP (an entry of sources.yaml) into
# DEST and record its provenance in DEST/.hpcvar-source, one line:
#     <app> <version> <git url> <commit>                                 (git fetch)
#     <app> <version> <tarball url> sha256:<hex>                         (tarball fetch)
#     <app> <version> <git url> <commit> mirror:<archive> sha256:<hex>   (from the source mirror)
#
# fetch.sh --mirror DIR [APP...] -- fill a source mirror DIR from upstream (on a machine with
# internet, for air-gapped sites): for every entry with a `mirror` archive name (all apps and
# their dependencies, or the APPs given), clone the pinned commit (with submodules when the
# entry says so) and write DIR/<archive> (a tar.gz with one top-level folder named like the
# archive, reproducible: sorted entries, mtime 2020-01-01 UTC, owner 0, modes normalised, gzip -n) and print its
# sha256 beside the pinned `mirror_sha256`. Existing archives with the pinned sum are kept.
# Paths an entry lists in `mirror_exclude` (files no build needs) are left out of its archive.
#
# Source mirror (the way Spack mirrors work): when HPCVAR_SOURCE_MIRROR names a directory and
# the entry has `mirror: <archive>`, the archive is taken from there instead of the network;
# its sha256 must equal the entry's `mirror_sha256` (a differing archive is refused, naming
# both sums). An archive missing from the mirror falls back to the upstream fetch, saying so.
#
# APP is an application (amg2013, amg2023, milc, minivite, umt) or APP/DEP for one of its
# dependencies (amg2023/hypre, umt/conduit). Fetching an application also fetches its
# dependencies into DEST/_deps/<dep> (set HPCVAR_FETCH_DEPS=0 to skip them); the build
# scripts look for them there.
#
# Environment:
#   HPCVAR_SOURCE_MIRROR directory of mirror archives to use before any network fetch
#   HPCVAR_OFFLINE       1: never fetch from upstream (no network): an archive missing from the
#                        mirror, or no mirror at all, is an error
#   HPCVAR_SOURCES       sources.yaml to read (default: ../sources.yaml next to this script,
#                        then ./sources.yaml next to it, then /opt/hpcvar/sources.yaml)
#   HPCVAR_FETCH_METHOD  git | tarball: override the entry's `fetch` (default git)
#   HPCVAR_FETCH_DEPS    0: do not fetch the dependencies of APP
#   HPCVAR_YAML_PARSER   python | awk: force a parser (default: python3 with PyYAML if it
#                        imports, else the built-in awk parser)
#
# Needs git (git fetch) or curl/wget + sha256sum/shasum + tar (tarball fetch). If DEST already
# holds a fetch of the same app, version, URL and ref it is kept (exit 0); any other non-empty
# DEST is an error. POSIX sh.
set -eu

prog=fetch.sh
say() { printf '[hpcvar-fetch] %s\n' "$*"; }
die() { printf '[hpcvar-fetch] error: %s\n' "$*" >&2; exit 1; }

MODE=fetch
if [ "${1:-}" = --mirror ]; then
    [ "$#" -ge 2 ] || { printf 'usage: %s --mirror DIR [APP...]\n' "$prog" >&2; exit 2; }
    MODE=mirror
    MIRROR_OUT=$2
    shift 2
    APP=
    DEST=
elif [ "$#" -ne 2 ]; then
    printf 'usage: %s APP[/DEP] DEST\n       %s --mirror DIR [APP...]\n' "$prog" "$prog" >&2
    exit 2
else
    APP=$1
    DEST=$2
fi

script_dir=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)

# ---------------------------------------------------------------- locate sources.yaml
if [ -n "${HPCVAR_SOURCES:-}" ]; then
    SOURCES=$HPCVAR_SOURCES
else
    SOURCES=
    for candidate in "$script_dir/../sources.yaml" "$script_dir/sources.yaml" /opt/hpcvar/sources.yaml; do
        if [ -f "$candidate" ]; then SOURCES=$candidate; break; fi
    done
    [ -n "$SOURCES" ] || die "sources.yaml not found (set HPCVAR_SOURCES)"
fi
[ -f "$SOURCES" ] || die "no such file: $SOURCES"

# ---------------------------------------------------------------- flatten the YAML
# Both parsers print one `dotted.key<TAB>value` line per scalar (lists are skipped,
# multi-line strings are joined with spaces).
tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/hpcvar-fetch.XXXXXX")
trap 'rm -rf "$tmpdir"' EXIT
trap 'exit 130' INT TERM
FLAT=$tmpdir/flat.tsv

flatten_python() {
    python3 - "$SOURCES" <<'EOF'
import sys
import yaml

def walk(prefix, node):
    if isinstance(node, dict):
        for key, value in node.items():
            walk(f"{prefix}.{key}" if prefix else str(key), value)
    elif isinstance(node, list):
        return
    else:
        if node is None:
            text = ""
        elif isinstance(node, bool):
            text = "true" if node else "false"
        else:
            text = " ".join(str(node).split())
        print(f"{prefix}\t{text}")

with open(sys.argv[1], encoding="utf-8") as fh:
    walk("", yaml.safe_load(fh) or {})
EOF
}

# Minimal YAML subset: nested block mappings by indentation, plain/quoted scalars, trailing
# comments, block scalars (| and >, skipped: only free text uses them). Enough for
# sources.yaml's schema; anything else is ignored rather than misread.
flatten_awk() {
    awk '
    function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
    {
        sub(/\r$/, "")
        line = $0
        if (inblock) {
            if (line ~ /^[ \t]*$/) next
            match(line, /^ */)
            if (RLENGTH > blockindent) next
            inblock = 0
        }
        if (line ~ /^[ \t]*$/ || line ~ /^[ \t]*#/) next
        if (line ~ /^---/ || line ~ /^\.\.\./) next
        match(line, /^ */)
        indent = RLENGTH
        body = substr(line, indent + 1)
        if (body ~ /^- /) next
        if (!match(body, /^[A-Za-z0-9_.\/-]+:/)) next
        key = substr(body, 1, RLENGTH - 1)
        rest = trim(substr(body, RLENGTH + 1))
        while (depth > 0 && indents[depth] >= indent) depth--
        path = ""
        for (i = 1; i <= depth; i++) path = path keys[i] "."
        path = path key
        if (rest == "" || rest ~ /^#/) {
            depth++; indents[depth] = indent; keys[depth] = key
            next
        }
        if (rest ~ /^[|>][-+0-9]*([ \t]+#.*)?$/) {
            inblock = 1; blockindent = indent
            next
        }
        q = substr(rest, 1, 1)
        if (q == "\"" || q == "\047") {
            end = index(substr(rest, 2), q)
            if (end > 0) rest = substr(rest, 2, end - 1)
            else rest = substr(rest, 2)
        } else {
            sub(/[ \t]+#.*$/, "", rest)
            rest = trim(rest)
        }
        if (rest ~ /^\[/ || rest ~ /^\{/) next
        printf "%s\t%s\n", path, rest
    }' "$SOURCES"
}

parser=${HPCVAR_YAML_PARSER:-}
if [ -z "$parser" ]; then
    if command -v python3 >/dev/null 2>&1 && python3 -c 'import yaml' >/dev/null 2>&1; then
        parser='python'
    else
        parser='awk'
    fi
fi
case $parser in
    python) flatten_python >"$FLAT" || die "could not parse $SOURCES with PyYAML" ;;
    awk) flatten_awk >"$FLAT" || die "could not parse $SOURCES with awk" ;;
    *) die "HPCVAR_YAML_PARSER must be python or awk, not '$parser'" ;;
esac

sha256_of() {  # sha256_of FILE -> hex digest
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | awk '{print $1}'
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 "$1" | awk '{print $1}'
    else
        die "neither sha256sum nor shasum found"
    fi
}

get() {  # get KEY -> value of APP's KEY (empty if absent)
    awk -F '\t' -v k="$entry.$1" '$1 == k { print substr($0, length($1) + 2); exit }' "$FLAT"
}

# ---------------------------------------------------------------- one entry
fetch_one() {  # fetch_one NAME DEST  (NAME: app or app/dep)
    name=$1
    dest=$2
    case $name in
        */*) entry="${name%%/*}.deps.${name#*/}" ;;
        *) entry=$name ;;
    esac
    awk -F '\t' -v p="$entry." 'index($1, p) == 1 { found = 1 } END { exit !found }' "$FLAT" \
        || die "no entry '$name' in $SOURCES"

    version=$(get version)
    git_url=$(get git)
    ref=$(get ref)
    tag=$(get tag)
    tarball=$(get tarball)
    sha256=$(get sha256)
    submodules=$(get submodules)
    commit_pin=$(get commit)
    mirror=$(get mirror)
    mirror_sha256=$(get mirror_sha256)
    method=${HPCVAR_FETCH_METHOD:-$(get fetch)}
    [ -n "$method" ] || method=git
    [ -n "$version" ] || die "$name: no version in $SOURCES"
    if [ -n "${HPCVAR_SOURCE_MIRROR:-}" ] && [ -n "$mirror" ]; then
        [ -d "$HPCVAR_SOURCE_MIRROR" ] || die "HPCVAR_SOURCE_MIRROR=$HPCVAR_SOURCE_MIRROR is not a directory"
        if [ -f "$HPCVAR_SOURCE_MIRROR/$mirror" ]; then
            method=mirror
        elif [ "${HPCVAR_OFFLINE:-0}" = 1 ]; then
            die "$name: $mirror is not in the source mirror $HPCVAR_SOURCE_MIRROR and HPCVAR_OFFLINE=1 forbids upstream fetches"
        else
            say "$name: $mirror is not in the source mirror $HPCVAR_SOURCE_MIRROR; falling back to upstream"
        fi
    fi
    if [ "$method" != mirror ] && [ "${HPCVAR_OFFLINE:-0}" = 1 ]; then
        die "$name: no source mirror (set HPCVAR_SOURCE_MIRROR; fill one with fetch.sh --mirror DIR where there is internet) and HPCVAR_OFFLINE=1 forbids upstream fetches"
    fi

    case $method in
        git)
            [ -n "$git_url" ] || die "$name: no git URL in $SOURCES"
            [ -n "$ref" ] || die "$name: no ref in $SOURCES"
            src_url=$git_url ;;
        tarball)
            [ -n "$tarball" ] || die "$name: fetch method tarball but no tarball in $SOURCES"
            [ -n "$sha256" ] || die "$name: tarball without sha256 in $SOURCES"
            src_url=$tarball ;;
        mirror)
            [ -n "$git_url" ] || die "$name: no git URL in $SOURCES"
            [ -n "$commit_pin" ] || die "$name: mirror archive $mirror but no commit in $SOURCES"
            [ -n "$mirror_sha256" ] || die "$name: mirror archive $mirror but no mirror_sha256 in $SOURCES"
            src_url=$git_url ;;
        *) die "$name: unknown fetch method '$method' (git or tarball)" ;;
    esac

    if [ -d "$dest" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
        if [ -f "$dest/.hpcvar-source" ]; then
            r_app='' r_version='' r_url='' r_id='' r_rest=''
            read -r r_app r_version r_url r_id r_rest <"$dest/.hpcvar-source" || true
            if [ "$r_app" = "$name" ] && [ "$r_version" = "$version" ] && [ "$r_url" = "$src_url" ]; then
                case $method in
                    git)
                        if printf '%s' "$ref" | grep -Eq '^[0-9a-f]{40}$' && [ "$r_id" != "$ref" ]; then
                            die "$dest holds $name at $r_id, sources.yaml pins $ref"
                        fi ;;
                    mirror)
                        [ "$r_id" = "$commit_pin" ] || die "$dest holds $name at $r_id, sources.yaml pins $commit_pin" ;;
                    tarball)
                        [ "$r_id" = "sha256:$sha256" ] || die "$dest holds $name with $r_id, sources.yaml pins sha256:$sha256" ;;
                esac
                say "$name $version already fetched in $dest ($r_id)"
                return 0
            fi
        fi
        die "$dest exists and is not empty (remove it or choose another DEST)"
    fi
    mkdir -p "$dest"

    if [ "$method" = mirror ]; then
        archive=$HPCVAR_SOURCE_MIRROR/$mirror
        actual=$(sha256_of "$archive")
        [ "$actual" = "$mirror_sha256" ] \
            || die "$name: sha256 mismatch for mirror archive $archive: the archive has $actual, sources.yaml pins $mirror_sha256 (archive refused)"
        say "$name $version: from the source mirror: $archive (sha256 $actual OK, upstream commit $commit_pin)"
        tar -xzf "$archive" -C "$dest" --strip-components=1 || die "$name: could not unpack $archive"
        record="$name $version $git_url $commit_pin mirror:$mirror sha256:$actual"
    elif [ "$method" = git ]; then
        command -v git >/dev/null 2>&1 || die "git not found"
        say "$name $version: git clone $git_url -> $dest"
        git clone --quiet --no-checkout -- "$git_url" "$dest" \
            || die "$name: git clone $git_url failed (offline? put $mirror in a source mirror and set HPCVAR_SOURCE_MIRROR)"
        say "$name: git checkout $ref"
        git -C "$dest" -c advice.detachedHead=false checkout --quiet --detach "$ref" \
            || die "$name: ref $ref not found in $git_url"
        if [ "$submodules" = true ]; then
            say "$name: git submodule update --init --recursive"
            git -C "$dest" submodule --quiet update --init --recursive
        fi
        commit=$(git -C "$dest" rev-parse HEAD)
        if printf '%s' "$ref" | grep -Eq '^[0-9a-f]{40}$' && [ "$commit" != "$ref" ]; then
            die "$name: checked out $commit, expected $ref"
        fi
        if [ -n "$tag" ]; then
            tag_commit=$(git -C "$dest" rev-parse --verify --quiet "refs/tags/$tag^{commit}") \
                || die "$name: tag $tag not found in $git_url"
            [ "$tag_commit" = "$commit" ] \
                || die "$name: tag $tag points at $tag_commit, not at the pinned $commit (tag moved?)"
        fi
        say "$name: at commit $commit"
        record="$name $version $git_url $commit"
    else
        archive=$tmpdir/source.tar
        say "$name $version: download $tarball"
        if command -v curl >/dev/null 2>&1; then
            curl -fsSL --retry 3 -o "$archive" "$tarball" || die "$name: download failed: $tarball"
        elif command -v wget >/dev/null 2>&1; then
            wget -q -O "$archive" "$tarball" || die "$name: download failed: $tarball"
        else
            die "neither curl nor wget found"
        fi
        actual=$(sha256_of "$archive")
        [ "$actual" = "$sha256" ] || die "$name: sha256 mismatch for $tarball: got $actual, expected $sha256"
        say "$name: sha256 $actual OK; unpacking into $dest"
        tar -xf "$archive" -C "$dest" --strip-components=1
        rm -f "$archive"
        record="$name $version $tarball sha256:$actual"
    fi
    printf '%s\n' "$record" >"$dest/.hpcvar-source.tmp"
    mv "$dest/.hpcvar-source.tmp" "$dest/.hpcvar-source"
    say "recorded: $record"
}

# ---------------------------------------------------------------- --mirror DIR
mirror_one() {  # mirror_one NAME: clone NAME's pinned commit, write its archive into MIRROR_OUT
    name=$1
    case $name in
        */*) entry="${name%%/*}.deps.${name#*/}" ;;
        *) entry=$name ;;
    esac
    mirror=$(get mirror)
    [ -n "$mirror" ] || { say "$name: no mirror archive in $SOURCES, skipped"; return 0; }
    git_url=$(get git)
    commit_pin=$(get commit)
    pinned=$(get mirror_sha256)
    [ -n "$commit_pin" ] || die "$name: no commit in $SOURCES"
    out=$MIRROR_OUT/$mirror
    if [ -f "$out" ] && [ "$(sha256_of "$out")" = "$pinned" ]; then
        say "$name: $out already in the mirror (sha256 $pinned)"
        return 0
    fi
    top=${mirror%.tar.gz}
    work=$tmpdir/mirror-$top
    say "$name: git clone $git_url (commit $commit_pin)"
    git clone --quiet --no-checkout -- "$git_url" "$work/$top" || die "$name: git clone $git_url failed"
    exclude=$(get mirror_exclude)
    if [ -n "$exclude" ]; then
        # Paths the archive leaves out (mirror_exclude) are not checked out at all (a sparse
        # checkout): the sum is the same whether or not a clone holds their blobs.
        info=$(git -C "$work/$top" rev-parse --git-path info)
        case $info in /*) ;; *) info=$work/$top/$info ;; esac
        mkdir -p "$info"
        { echo '/*'; for path in $exclude; do echo "!/${path%/}"; done; } >"$info/sparse-checkout"
        git -C "$work/$top" config core.sparseCheckout true
        say "$name: left out of the archive (mirror_exclude): $exclude"
    fi
    git -C "$work/$top" -c advice.detachedHead=false checkout --quiet --detach "$commit_pin" 2>"$tmpdir/checkout.err" \
        || { cat "$tmpdir/checkout.err" >&2; die "$name: commit $commit_pin not found in $git_url"; }
    # A clone without the excluded paths' blobs makes git say "invalid object ... for '<path>'"
    # (its index cannot cache their tree); only those lines are dropped.
    for path in $exclude; do printf "for '%s/\n" "${path%/}"; done >"$tmpdir/excluded.err"
    grep -v -F -f "$tmpdir/excluded.err" "$tmpdir/checkout.err" >&2 || true
    if [ "$(get submodules)" = true ]; then
        git -C "$work/$top" submodule --quiet update --init --recursive
    fi
    # A clone that lacks objects (a shallow or partial mirror) checks out with files missing.
    [ -z "$(git -C "$work/$top" status --porcelain)" ] \
        || die "$name: the checkout of $commit_pin is incomplete (git status lists changes): $git_url lacks objects"
    # Nothing of the machine or of whoever fills the mirror reaches the archive: entries sorted by
    # name, every mtime 2020-01-01T00:00:00Z given as seconds since the epoch (a date alone is
    # local time: the archive's bytes would follow the timezone), owner 0, modes normalised (not
    # the umask's), no VCS files, gzip without name and time.
    tar --sort=name --mtime=@1577836800 --owner=0 --group=0 --numeric-owner --mode=go-w,u+rw,a+rX --exclude-vcs \
        -C "$work" -cf - "$top" | gzip -n >"$out.tmp"
    mv "$out.tmp" "$out"
    actual=$(sha256_of "$out")
    if [ "$actual" = "$pinned" ]; then
        say "$name: wrote $out (sha256 $actual, as pinned)"
    else
        say "$name: wrote $out (sha256 $actual; sources.yaml pins $pinned: set mirror_sha256 to the new sum after checking the tree)"
    fi
    rm -rf "$work"
}

if [ "$MODE" = mirror ]; then
    command -v git >/dev/null 2>&1 || die "git not found"
    mkdir -p "$MIRROR_OUT"
    if [ "$#" -eq 0 ]; then
        set -- $(awk -F '\t' '{ split($1, k, "."); if (!(k[1] in seen)) { seen[k[1]] = 1; print k[1] } }' "$FLAT")
    fi
    for app in "$@"; do
        entry=$app
        awk -F '\t' -v p="$app." 'index($1, p) == 1 { found = 1 } END { exit !found }' "$FLAT" \
            || die "no entry '$app' in $SOURCES"
        mirror_one "$app"
        deps=$(awk -F '\t' -v p="$app.deps." 'index($1, p) == 1 {
                   d = substr($1, length(p) + 1); sub(/\..*/, "", d); if (!(d in seen)) { seen[d] = 1; print d } }' "$FLAT")
        for dep in $deps; do
            mirror_one "$app/$dep"
        done
    done
    exit 0
fi

fetch_one "$APP" "$DEST"

case $APP in
    */*) ;;
    *)
        if [ "${HPCVAR_FETCH_DEPS:-1}" != 0 ]; then
            deps=$(awk -F '\t' -v p="$APP.deps." 'index($1, p) == 1 {
                       d = substr($1, length(p) + 1); sub(/\..*/, "", d); if (!(d in seen)) { seen[d] = 1; print d } }' "$FLAT")
            for dep in $deps; do
                fetch_one "$APP/$dep" "$DEST/_deps/$dep"
            done
        fi ;;
esac
