#!/bin/sh
# fetch.sh APP DEST -- fetch the pinned upstream source of APP (an entry of sources.yaml) into
# DEST and record its provenance in DEST/.hpcvar-source, one line:
#     <app> <version> <git url> <commit>            (git fetch)
#     <app> <version> <tarball url> sha256:<hex>    (tarball fetch)
#
# APP is an application (amg2013, amg2023, milc, minivite, umt) or APP/DEP for one of its
# dependencies (amg2023/hypre, umt/conduit). Fetching an application also fetches its
# dependencies into DEST/_deps/<dep> (set HPCVAR_FETCH_DEPS=0 to skip them); the build
# scripts look for them there.
#
# Environment:
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

if [ "$#" -ne 2 ]; then
    printf 'usage: %s APP[/DEP] DEST\n' "$prog" >&2
    exit 2
fi
APP=$1
DEST=$2

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
    method=${HPCVAR_FETCH_METHOD:-$(get fetch)}
    [ -n "$method" ] || method=git
    [ -n "$version" ] || die "$name: no version in $SOURCES"

    case $method in
        git)
            [ -n "$git_url" ] || die "$name: no git URL in $SOURCES"
            [ -n "$ref" ] || die "$name: no ref in $SOURCES"
            src_url=$git_url ;;
        tarball)
            [ -n "$tarball" ] || die "$name: fetch method tarball but no tarball in $SOURCES"
            [ -n "$sha256" ] || die "$name: tarball without sha256 in $SOURCES"
            src_url=$tarball ;;
        *) die "$name: unknown fetch method '$method' (git or tarball)" ;;
    esac

    if [ -d "$dest" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
        if [ -f "$dest/.hpcvar-source" ]; then
            r_app='' r_version='' r_url='' r_id=''
            read -r r_app r_version r_url r_id <"$dest/.hpcvar-source" || true
            if [ "$r_app" = "$name" ] && [ "$r_version" = "$version" ] && [ "$r_url" = "$src_url" ]; then
                case $method in
                    git)
                        if printf '%s' "$ref" | grep -Eq '^[0-9a-f]{40}$' && [ "$r_id" != "$ref" ]; then
                            die "$dest holds $name at $r_id, sources.yaml pins $ref"
                        fi ;;
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

    if [ "$method" = git ]; then
        command -v git >/dev/null 2>&1 || die "git not found"
        say "$name $version: git clone $git_url -> $dest"
        git clone --quiet --no-checkout -- "$git_url" "$dest"
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
        if command -v sha256sum >/dev/null 2>&1; then
            actual=$(sha256sum "$archive" | awk '{print $1}')
        elif command -v shasum >/dev/null 2>&1; then
            actual=$(shasum -a 256 "$archive" | awk '{print $1}')
        else
            die "neither sha256sum nor shasum found"
        fi
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
