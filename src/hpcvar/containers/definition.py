"""The image definitions (``containers/images.yaml``): one per image, validated, and what both
builders run from them.

:func:`load` reads and checks the file (a JSON schema, then the references: files that exist,
sources that are pinned); :func:`build_script` is the shell script that builds an image's code
in the builder stage, the same text for Charliecloud here (:mod:`hpcvar.containers.build`) and
for Apptainer at a site (:func:`apptainer_recipe`, the generated ``containers/<name>.def``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

#: The definitions, relative to the project directory (the current directory of every command).
DEFINITIONS = "containers/images.yaml"
#: Where things live inside every image and the builder.
BUILD_DIR = "/opt/hpcvar/build"      # the repository files an image's build needs
SRC_ROOT = "/opt/hpcvar/src"         # fetched upstream sources, one folder per image
APPS_ROOT = "/opt/hpcvar/apps"       # install prefixes, one per image: PREFIX/bin/<executable>
MIRROR_DIR = "/opt/hpcvar/mirror"    # the source mirror, bound in at build time
IMAGE_INFO = "/opt/hpcvar/image.json"  # the image's own record (name, definition, packages)
#: ReFrame's default mount point of the stage directory: a bind target must exist in the image.
WORKDIR = "/rfm_workdir"
#: Lists the packages an install prefix's programs load libraries from (runs in the builder).
RUNTIME_PACKAGES_SCRIPT = "containers/runtime-packages.sh"
#: The pins and the fetch script, for images built from upstream sources.
SOURCES_FILES = ("reframe_tests/apps/sources.yaml", "reframe_tests/apps/build/fetch.sh")

SCHEMA = {
    "type": "object",
    "required": ["distribution", "base", "builder", "images"],
    "additionalProperties": False,
    "properties": {
        "distribution": {
            "type": "object", "required": ["name", "release", "mirror", "docker"], "additionalProperties": False,
            "properties": {"name": {"enum": ["debian", "ubuntu"]}, "release": {"type": "string", "pattern": "^[a-z]+$"},
                           "mirror": {"type": "string", "pattern": "^https?://"}, "docker": {"type": "string"}}},
        "base": {"$ref": "#/$defs/packages"},
        "builder": {"$ref": "#/$defs/packages"},
        "images": {
            "type": "object", "minProperties": 1,
            "propertyNames": {"pattern": "^[a-z][a-z0-9-]*$"},
            "additionalProperties": {
                "type": "object", "required": ["description", "tests", "build", "executables"],
                "additionalProperties": False,
                "properties": {
                    "description": {"type": "string", "minLength": 1},
                    "tests": {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}},
                    "source": {"type": "string"},
                    "files": {"type": "array", "items": {"type": "string"}, "default": []},
                    "build": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                    "executables": {"type": "array", "minItems": 1,
                                    "items": {"type": "string", "pattern": "^[A-Za-z0-9_.+-]+$"}}}}}},
    "$defs": {"packages": {
        "type": "object", "required": ["packages"], "additionalProperties": False,
        "properties": {"packages": {"type": "array", "minItems": 1, "uniqueItems": True,
                                    "items": {"type": "string", "pattern": "^[a-z0-9][a-z0-9+.-]+$"}}}}},
}


class DefinitionError(ValueError):
    """The definitions file is malformed or names something that is not there; says which."""


@dataclass(frozen=True)
class Distribution:
    name: str
    release: str
    mirror: str
    docker: str

    def __str__(self) -> str:
        return f"{self.name} {self.release}"


@dataclass(frozen=True)
class Image:
    """One image of the definitions file."""

    name: str
    description: str
    tests: tuple[str, ...]
    build: tuple[str, ...]
    executables: tuple[str, ...]
    files: tuple[str, ...] = ()
    source: str | None = None

    @property
    def prefix(self) -> str:
        return f"{APPS_ROOT}/{self.name}"

    @property
    def src(self) -> str:
        return f"{SRC_ROOT}/{self.name}"

    def executable(self, program: str) -> str:
        """The absolute path of ``program`` inside the image."""
        return f"{self.prefix}/bin/{program}"

    def copied_files(self) -> tuple[str, ...]:
        """Every repository path the build stage gets: the image's files, the pins and the fetch
        script when it builds upstream sources, and the runtime-packages script."""
        extra = SOURCES_FILES if self.source else ()
        return tuple(dict.fromkeys([*self.files, *extra, RUNTIME_PACKAGES_SCRIPT]))


@dataclass(frozen=True)
class Definitions:
    path: Path
    root: Path                 # the project directory the files are relative to
    distribution: Distribution
    base: tuple[str, ...]      # run-time packages of every image: the hosts' MPI and PMIx
    builder: tuple[str, ...]   # packages of the builder stage only
    images: dict[str, Image]

    def image(self, name: str) -> Image:
        if name not in self.images:
            raise DefinitionError(f"{self.path}: no image {name!r} (defined: {', '.join(self.images)})")
        return self.images[name]

    def image_for_test(self, test: str) -> Image | None:
        """The image a ReFrame test (by class name) runs in, or None."""
        return next((i for i in self.images.values() if test in i.tests), None)


def load(path: str | Path = DEFINITIONS, root: str | Path | None = None) -> Definitions:
    """The definitions file, checked: the schema, one image per test, the copied files exist
    (relative to ``root``, default the file's grandparent: the project directory), every
    ``source`` is an entry of the pins."""
    import jsonschema
    import yaml

    path = Path(path)
    if not path.is_file():
        raise DefinitionError(f"{path}: no such file (the image definitions, {DEFINITIONS} in the project directory)")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        raise DefinitionError(f"{path}{where}: not YAML: {getattr(exc, 'problem', exc)}") from None
    try:
        jsonschema.validate(doc, SCHEMA)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the top level"
        raise DefinitionError(f"{path}: {where}: {exc.message}") from None
    root = Path(root) if root is not None else path.resolve().parent.parent
    images = {}
    owner: dict[str, str] = {}
    pins = None
    for name, entry in doc["images"].items():
        image = Image(name=name, description=entry["description"], tests=tuple(entry["tests"]),
                      build=tuple(entry["build"]), executables=tuple(entry["executables"]),
                      files=tuple(entry.get("files", [])), source=entry.get("source"))
        for test in image.tests:
            if test in owner:
                raise DefinitionError(f"{path}: test {test} is in two images, {owner[test]} and {name}")
            owner[test] = name
        for rel in image.copied_files():
            if not (root / rel).exists():
                raise DefinitionError(f"{path}: image {name}: {rel} does not exist under {root}")
        if image.source:
            if pins is None:
                pins = yaml.safe_load((root / SOURCES_FILES[0]).read_text())
            if image.source not in pins:
                raise DefinitionError(f"{path}: image {name}: source {image.source!r} is not an entry of "
                                      f"{SOURCES_FILES[0]} ({', '.join(pins)})")
        images[name] = image
    d = doc["distribution"]
    return Definitions(path=path, root=root, distribution=Distribution(d["name"], d["release"], d["mirror"], d["docker"]),
                       base=tuple(doc["base"]["packages"]), builder=tuple(doc["builder"]["packages"]), images=images)


def build_script(image: Image) -> str:
    """The build stage's script of ``image``: run as ``sh`` in :data:`BUILD_DIR` of the builder.

    Identical for Charliecloud (here) and Apptainer (a site's ``%post``): fetch the pinned source
    (from the mirror bound at :data:`MIRROR_DIR` when one is), run the build lines, check the
    executables, record the source's provenance and the run-time packages the programs load."""
    q = shlex.quote
    lines = [
        f"# Build stage of image {image.name} (containers/images.yaml): {image.description}",
        "set -eu",
        f"export PREFIX={image.prefix} SRC={image.src} MAKE_JOBS=\"${{MAKE_JOBS:-2}}\" HOME=/tmp",
        f"cd {BUILD_DIR}",
        f"mkdir -p \"$PREFIX/share/hpcvar\" \"$SRC\"",
    ]
    if image.source:
        lines += [
            "# The source mirror, when one is bound in: sources only from there (nothing fetched is kept).",
            f"if [ -n \"$(ls -A {MIRROR_DIR} 2>/dev/null)\" ]; then",
            f"    export HPCVAR_SOURCE_MIRROR={MIRROR_DIR} HPCVAR_OFFLINE=1",
            "fi",
            f"HPCVAR_SOURCES={SOURCES_FILES[0]} sh {SOURCES_FILES[1]} {q(image.source)} \"$SRC\"",
        ]
    lines += list(image.build)
    lines += [
        f"for exe in {' '.join(q(e) for e in image.executables)}; do",
        "    test -x \"$PREFIX/bin/$exe\" || { echo \"build of " + image.name + ": $PREFIX/bin/$exe was not installed\" >&2; exit 1; }",
        "done",
    ]
    if image.source:
        lines.append("cp \"$SRC/.hpcvar-source\" \"$PREFIX/.hpcvar-source\"")
    lines += [
        "test -s \"$PREFIX/.hpcvar-source\" || { echo \"build of " + image.name
        + ": no $PREFIX/.hpcvar-source (the build's provenance)\" >&2; exit 1; }",
        f"sh {RUNTIME_PACKAGES_SCRIPT} \"$PREFIX\" > \"$PREFIX/share/hpcvar/runtime-packages.txt\"",
    ]
    return "\n".join(lines) + "\n"


def check_script(image: Image) -> str:
    """Run in the finished image: every executable is there and finds every library it loads."""
    exes = " ".join(shlex.quote(image.executable(e)) for e in image.executables)
    return (f"set -eu\nfor exe in {exes}; do\n"
            "    test -x \"$exe\" || { echo \"$exe: missing\" >&2; exit 1; }\n"
            "    if ldd \"$exe\" | grep 'not found'; then echo \"$exe: libraries not found in the image\" >&2; exit 1; fi\n"
            "done\n")


def recipe_path(defs: Definitions, image: Image) -> Path:
    return defs.root / "containers" / f"{image.name}.def"


def stale_recipes(defs: Definitions, names: list[str] | None = None) -> list[Path]:
    """The generated Apptainer recipes that are missing or differ from their definition."""
    images = [defs.image(n) for n in names] if names else list(defs.images.values())
    return [recipe_path(defs, i) for i in images
            if not recipe_path(defs, i).is_file() or recipe_path(defs, i).read_text() != apptainer_recipe(defs, i)]


def apptainer_recipe(defs: Definitions, image: Image) -> str:
    """The Apptainer recipe of ``image``: the same two stages, the same build script. Written to
    ``containers/<name>.def`` (``hpcvar containers recipe NAME --write``)."""
    dist = defs.distribution
    indent = lambda text: "\n".join(f"    {line}" if line else "" for line in text.rstrip("\n").split("\n"))  # noqa: E731
    files = "\n".join(f"    {rel} {BUILD_DIR}/{rel}" for rel in image.copied_files())
    build_packages = " ".join([*defs.base, *defs.builder])
    base_packages = " ".join(defs.base)
    labels = [f"org.hpcvar.image {image.name}", f"org.hpcvar.distribution {dist}",
              f"org.hpcvar.executables {','.join(image.executables)}", f"org.hpcvar.tests {','.join(image.tests)}"]
    if image.source:
        import yaml

        pin = yaml.safe_load((defs.root / SOURCES_FILES[0]).read_text())[image.source]
        labels += [f"org.hpcvar.source {image.source}", f"org.hpcvar.source.version {pin['version']}",
                   f"org.hpcvar.source.git {pin['git']}", f"org.hpcvar.source.commit {pin['commit']}",
                   f"org.hpcvar.source.mirror {pin['mirror']} sha256:{pin['mirror_sha256']}"]
        labels += [f"org.hpcvar.dep.{dep} {d['version']} {d.get('commit') or d.get('sha256') or d['ref']}"
                   for dep, d in (pin.get("deps") or {}).items()]
    mirror_note = (f"# Table I code: bind a source mirror in for the build (nothing is fetched from upstream):\n"
                   f"#     apptainer build --bind $HPCVAR_SOURCE_MIRROR:{MIRROR_DIR} {image.name}.sif containers/{image.name}.def\n"
                   if image.source else f"#     apptainer build {image.name}.sif containers/{image.name}.def\n")
    runtime_list = f"{image.prefix}/share/hpcvar/runtime-packages.txt"
    return f"""\
# GENERATED from {DEFINITIONS} by `hpcvar containers recipe {image.name} --write`: edit the definition,
# not this file (tests/test_containers.py fails when the two disagree).
# {image.description}; tests: {', '.join(image.tests)}.
# Build from the root of the hpcvar repository (the %files paths are relative to it), Apptainer >= 1.1:
{mirror_note}# Run under Slurm, the host launching the ranks (docs/how-to/containers.md, "How the ranks start"):
#     srun --mpi=pmix apptainer exec {image.name}.sif {image.executable(image.executables[0])} ...

Bootstrap: docker
From: {dist.docker}
Stage: build

%files
{files}

%post
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends {build_packages}
    mkdir -p {MIRROR_DIR}
{indent(build_script(image))}

Bootstrap: docker
From: {dist.docker}
Stage: final

%files from build
    {image.prefix} {image.prefix}

%post
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends {base_packages} $(cat {runtime_list})
    apt-get clean
    rm -rf /var/lib/apt/lists/*
    mkdir -p {WORKDIR}

%environment
    export PATH="{image.prefix}/bin:$PATH"
    export HPCVAR_IMAGE={image.name}
    export HPCVAR_SOURCE_FILE={image.prefix}/.hpcvar-source

%runscript
    exec {image.executable(image.executables[0])} "$@"

%test
{indent(check_script(image))}
    cat {image.prefix}/.hpcvar-source

%labels
{chr(10).join('    ' + line for line in labels)}

%help
    {image.description}, built with the suite's own build script from {DEFINITIONS}.
    Provenance: `sha256sum {image.name}.sif` is the image digest; {image.prefix}/.hpcvar-source
    is the build's source line; `apptainer inspect --labels {image.name}.sif` the labels.
"""
