#!/usr/bin/env python3
"""Fails when the docs or a header comment cite a path or an identifier that no longer exists.

Usage: check_references.py [-v] [REPO_ROOT]   (default: the repository this script lies in;
       -v lists every reference checked)
Registered with CTest as `docs` (label `unit`). Python 3 standard library only.

What is scanned
  - README.md and every docs/**/*.md: the whole text for paths; inline code spans (outside
    fenced blocks) for identifiers; link targets `[text](target)` for paths.
  - every .h under src/, include/, tools/, bench/: comment lines only (a line whose first
    non-blank characters are `//`), for paths.

Links
  A link target `[text](target)` must exist relative to the citing file's folder (URLs are not
  checked); `target#anchor` to a Markdown file, or `#anchor` alone, must name one of that
  file's headings (GitHub's anchor: lower case, punctuation dropped, spaces as `-`).

Paths
  A token is a path when it contains a `/` and either its first component names a folder of
  the repository root (src, tests, docs, bench, scripts, .ci, ...) or of src/ or include/
  (loop, ir, codegen, kiln, ...), or its last component ends in one of PATH_EXTENSIONS.
  A token without a `/` is a file name when it ends in one of FILE_NAME_EXTENSIONS.
  - A path resolves when it exists relative to the repository root, src/, include/ or the
    folder of the citing file. `*`, `?` and `<placeholder>` are wildcards (at least one file
    must match), `{a,b}` lists alternatives (each must resolve), a trailing `/` is a folder,
    and a path whose last component has no extension may name a module (`ir/parser`: parser.h
    or parser.cc).
  - A path whose first component is not such a folder is relative to a folder the text names
    nearby (`lowering/<family>.cc` on README's line for `src/loop/`): it resolves when some
    path in the repository ends with it, whole components.
  - A file name resolves when a file of that name exists anywhere in the repository (outside
    build folders), or relative to the citing file's folder. A name whose stem is in capitals
    and that exists nowhere (`FILE.json`, `OUT.txt`) is a placeholder.
  - Not checked: URLs; paths outside the repository (starting with `/`, `~`, `..`, `$VAR`, or
    a placeholder such as `<cache root>/...`); paths under build folders (`build/`,
    `build-*/`) or the peers' virtual environment (`.venv-peers/`); paths under the folders of
    Kiln's cache root in CACHE_FOLDERS (`device/<hash>.json`); and the names in GENERATED
    (what `kiln compile` and gpu-check write), UNPACKED (folders an archive unpacks to) and
    EXTERNAL (system and third-party files a text may name).
    These lists are explicit: add a name there, with its reason, rather than loosening a rule.

Identifiers (Markdown inline code spans only)
  A code span is checked when it is, as a whole, an identifier of Kiln's own form, optionally
  called (`name()`, `name(args)`: the name is checked, not the arguments):
  - snake_case with an inner underscore (`build_gradients`, `layer_norm`),
  - CamelCase with an inner capital (`ImportedModel`, `DType`, `IRVisitor`),
  - qualified (`Graph::add_node`, `kiln::Compiler`): every component is checked,
  - a GoogleTest name `Suite.TestName` (both parts CamelCase): both parts are checked,
  - an environment variable or macro `KILN_*`, also as `$KILN_X` or `KILN_X=value`.
  It must occur as a whole word in a file under src/, include/, tools/, tests/, bench/,
  scripts/ or python/ (this folder, tests/docs/, excluded). Not checked: spans with other text (shell
  commands, IR and C++ snippets, formulas), command-line flags (`--fusion`), IR names (`%x`,
  `@g`), types (`f32[2]`), dotted names (`torch.optim.Adam`), kebab-case names (pass and rule
  names), plain words (`gemm`), capitalised words without an inner capital (`Status`), and
  all-capitals names not starting with KILN_ (other programs' variables, `OMP_NUM_THREADS`).
  Names of other software written in Kiln's identifier form are listed in EXTERNAL_IDENTIFIERS.

Stage lists
  The pipeline's stages are listed once, in src/compiler/options.h (KILN_STAGES); the table of
  docs/design/compiler.md and README's "The stages, in order: ..." must list the same, in order.

Runs in well under a second; prints `file:line: what` for each stale reference and exits 1.
"""

import os
import re
import sys

PATH_EXTENSIONS = {
    "h", "cc", "cpp", "c", "cu", "def", "py", "sh", "md", "txt", "json", "rules", "kiln",
    "png", "cmake", "yml", "yaml", "toml", "cfg", "in",
}
FILE_NAME_EXTENSIONS = {
    "h", "cc", "cpp", "cu", "def", "py", "sh", "md", "txt", "json", "rules", "kiln", "png",
    "cmake",
}

# Files Kiln or its harnesses write; named in the docs, never in the repository.
GENERATED = {
    "kernels.cc",    # kiln compile -o DIR: the kernels' C++
    "kernels.loop",  # kiln compile -o DIR: the kernels' scheduled loop IR
    "plan.txt",      # kiln compile -o DIR: the memory plan and every step
    "kernels.cu",    # kiln compile --device cuda: the CUDA C
    "launches.txt",  # kiln compile --device cuda: each kernel's launches
    "gpu-check.md",    # tests/gpu/gpu-check REPORT_DIR: the report
    "gpu-check.json",  # tests/gpu/gpu-check REPORT_DIR: the report as data
}

# Folders that exist only once an archive is unpacked (scripts/gpu-bundle's kiln/).
UNPACKED = {
    "kiln",  # the GPU bundle: kiln/bin/kiln, kiln/bin/gpu-check, ...
}

# Folders of Kiln's cache root (~/.cache/kiln, $KILN_CACHE_DIR) that texts cite relative to it.
CACHE_FOLDERS = {
    "device",  # device/<hash>.json: measured device profiles (cost/device_profile.h)
}

# System and third-party files a text may name (they are not Kiln's).
EXTERNAL = {
    "cblas.h",  # OpenBLAS's C interface, included by the CPU prelude
    "cuda.h",   # the CUDA driver API's header, from the CUDA toolkit (runtime/cuda_driver.h)
    "cublasLt.h",  # cuBLASLt's header, from the CUDA toolkit (runtime/cublaslt.h)
    "dnnl.h",   # oneDNN's C interface, included by the CPU prelude
    "math.h",   # the C library's math header
    "onnx_pb.h",  # the ONNX library's generated protobuf header
}

# Names of other software that have the form of a Kiln identifier.
EXTERNAL_IDENTIFIERS = {
    "clear_page",  # the Linux kernel's page-zeroing routine, as perf names it
    "CapabilityBasedPartitioner",  # torch.fx's partitioner, which the Python backend uses
}

# Top-level folders whose contents are build outputs, never checked in.
BUILD_FOLDER = re.compile(r"^build(-[\w.-]+)?$")

# Folders the identifier corpus is read from; tests/docs (this script) is left out.
CORPUS_FOLDERS = ["src", "include", "tools", "tests", "bench", "scripts", "python"]
SKIPPED_CORPUS = {os.path.join("tests", "docs")}
SKIPPED_WALK = {".git", "__pycache__", "node_modules"}

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PLACEHOLDER = re.compile(r"<[^<>\n]{1,40}>")
PATH_CANDIDATE = re.compile(r"[\w.~$*?{},+\-]*(?:/[\w.*?{},+\-]*)+")
FILE_CANDIDATE = re.compile(r"(?<![\w/.\-*])[\w.+\-]+\.([A-Za-z0-9]+)(?![\w/])")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
QUALIFIED_CALL = re.compile(r"(?P<name>(?:%s::)*~?%s)(?:\((?P<args>.*)\))?" % (IDENT, IDENT))
TEST_NAME = re.compile(r"(?P<suite>[A-Z]\w*)\.(?P<test>[A-Z]\w*)")
KILN_NAME = re.compile(r"\$?(?P<name>KILN_[A-Z0-9_]+)(?:=\S*)?")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(?P<code>.+?)(?<!`)\1(?!`)", re.S)
LINK_TARGET = re.compile(r"\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


class Repo:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.top = set()
        for name in os.listdir(self.root):
            if os.path.isdir(os.path.join(self.root, name)) and name not in SKIPPED_WALK:
                if not BUILD_FOLDER.match(name) and not name.startswith(".venv"):
                    self.top.add(name)
        self.roots = set(self.top)
        for base in ("src", "include"):
            folder = os.path.join(self.root, base)
            if os.path.isdir(folder):
                self.roots.update(n for n in os.listdir(folder)
                                  if os.path.isdir(os.path.join(folder, n)))
        self.basenames = set()
        self.all_paths = []  # every file and folder, relative to the root, `/`-separated
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            dirnames[:] = [d for d in dirnames if d not in SKIPPED_WALK and not
                           (rel == "." and (BUILD_FOLDER.match(d) or d.startswith(".venv")))]
            self.basenames.update(filenames)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            self.all_paths.extend(prefix + n for n in dirnames + filenames)
        self._words = None

    def words(self):
        if self._words is None:
            words = set()
            for folder in CORPUS_FOLDERS:
                for dirpath, dirnames, filenames in os.walk(os.path.join(self.root, folder)):
                    rel = os.path.relpath(dirpath, self.root)
                    dirnames[:] = [d for d in dirnames if d not in SKIPPED_WALK and
                                   os.path.join(rel, d) not in SKIPPED_CORPUS]
                    for name in filenames:
                        path = os.path.join(dirpath, name)
                        try:
                            with open(path, "rb") as f:
                                data = f.read(4 << 20)
                        except OSError:
                            continue
                        if b"\0" in data[:4096]:
                            continue  # binary
                        words.update(WORD.findall(data.decode("utf-8", "replace")))
            self._words = words
        return self._words


def expand_braces(text):
    match = re.search(r"\{([^{}]*)\}", text)
    if not match:
        return [text]
    out = []
    for alt in match.group(1).split(","):
        out.extend(expand_braces(text[:match.start()] + alt + text[match.end():]))
    return out


def has_wildcard(text):
    return any(c in text for c in "*?[")


def glob_exists(base, pattern):
    # A small glob over path components (`*` and `?` within one component).
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    candidates = [base]
    for part in parts:
        regex = re.compile("^" + re.escape(part).replace(r"\*", ".*").replace(r"\?", ".") + "$")
        nxt = []
        for c in candidates:
            if not os.path.isdir(c):
                continue
            if has_wildcard(part):
                nxt.extend(os.path.join(c, n) for n in os.listdir(c) if regex.match(n))
            elif os.path.exists(os.path.join(c, part)):
                nxt.append(os.path.join(c, part))
        candidates = nxt
        if not candidates:
            return False
    return bool(candidates)


def glob_regex(pattern):
    return re.escape(pattern).replace(r"\*", "[^/]*").replace(r"\?", "[^/]")


def exists_as_suffix(repo, variants):
    """Whether some path of the repository ends with one of `variants` (whole components)."""
    regex = re.compile("(?:.*/)?(?:%s)" % "|".join(glob_regex(v) for v in variants))
    return any(regex.fullmatch(p) for p in repo.all_paths)


def exists_one(repo, citing_dir, path):
    trailing_slash = path.endswith("/")
    path = path.rstrip("/")
    last = path.rsplit("/", 1)[-1]
    variants = [path]
    if not trailing_slash and "." not in last and not has_wildcard(last):
        variants += [path + ext for ext in (".h", ".cc", ".py", ".sh")]
    for base in (repo.root, os.path.join(repo.root, "src"), os.path.join(repo.root, "include"),
                 citing_dir):
        for v in variants:
            if has_wildcard(v):
                if glob_exists(base, v):
                    return True
            else:
                full = os.path.join(base, v)
                if (os.path.isdir(full) if trailing_slash else os.path.exists(full)):
                    return True
    if path.split("/")[0] not in repo.roots:
        # Relative to a folder the text names nearby (`lowering/<family>.cc` after `src/loop/`).
        return exists_as_suffix(repo, variants)
    return False


def clean_token(token):
    token = token.lstrip("([\"'")
    while token and token[-1] in ".,;:)]\"'!":
        if token[-1] == "," and token.count("{") > token.count("}"):
            break
        token = token[:-1]
    if token.endswith("'s"):
        token = token[:-2]
    return token


def classify_path(repo, token):
    """Returns the path to check, or None when the token is not a repository path."""
    token = clean_token(token)
    if "/" not in token or "://" in token or token.startswith(("www.", "http")):
        return None
    if token.startswith(("/", "~", "$", "..", "*")):
        return None  # outside the repository, or under a placeholder root
    if token.startswith("./"):
        token = token[2:]
    parts = token.split("/")
    first = parts[0]
    if BUILD_FOLDER.match(first) or first.startswith(".venv"):
        return None  # build outputs
    if first in CACHE_FOLDERS and first not in repo.roots:
        return None  # under Kiln's cache root
    last = parts[-1] if parts[-1] else (parts[-2] if len(parts) > 1 else "")
    ext = last.rsplit(".", 1)[1] if "." in last else ""
    if first in repo.roots and first:
        return token
    if ext in PATH_EXTENSIONS and not any(p == "" for p in parts[:-1]):
        return token
    return None


def check_path(repo, citing_dir, token):
    if last_name(token) in GENERATED or last_name(token) in EXTERNAL:
        return True
    if token.split("/")[0] in UNPACKED and "/" in token:
        return True
    return all(exists_one(repo, citing_dir, alt) for alt in expand_braces(token))


def last_name(token):
    return token.rstrip("/").rsplit("/", 1)[-1]


def check_file_name(repo, citing_dir, name):
    if name in GENERATED or name in EXTERNAL or name in repo.basenames:
        return True
    return os.path.exists(os.path.join(citing_dir, name))


def is_kiln_form(name):
    if name in EXTERNAL_IDENTIFIERS:
        return False
    if re.fullmatch(r"[A-Z0-9_]+", name):
        return name.startswith("KILN_")  # other programs' constants and variables
    if re.search(r"[A-Za-z0-9]_[A-Za-z0-9]", name):
        return True  # snake_case
    if re.search(r"[a-z0-9][A-Z]", name) or re.match(r"[A-Z]{2,}[a-z]", name):
        return True  # CamelCase with an inner capital
    return False


def identifiers_in_span(code):
    """Returns the names a code span asks to check (empty when it is not an identifier)."""
    code = code.strip()
    if not code or code[0] in "-%@#":
        return []
    m = KILN_NAME.fullmatch(code)
    if m:
        return [m.group("name")]
    m = TEST_NAME.fullmatch(code)
    if m and is_kiln_form(m.group("suite")) and is_kiln_form(m.group("test")):
        return [m.group("suite"), m.group("test")]
    m = QUALIFIED_CALL.fullmatch(code)
    if not m:
        return []
    name = m.group("name")
    if "::" in name:
        return [p.lstrip("~") for p in name.split("::")]
    return [name] if is_kiln_form(name) else []


def heading_anchors(path):
    """The anchors GitHub gives a Markdown file's headings (lowercase, punctuation dropped)."""
    anchors = set()
    try:
        with open(path, encoding="utf-8") as f:
            fenced = False
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                elif not fenced and line.startswith("#"):
                    title = line.lstrip("#").strip().lower()
                    anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    except OSError:
        pass
    return anchors


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


class Checker:
    def __init__(self, repo):
        self.repo = repo
        self.problems = []
        self.reported = set()
        self.counts = {"files": 0, "paths": 0, "file names": 0, "identifiers": 0}

    verbose = False

    def checked(self, rel, line, kind, token):
        if self.verbose:
            print("%s:%d: %s %s" % (rel, line, kind, token))

    def report(self, rel, line, what, token):
        key = (rel, line, token)
        if key not in self.reported:  # a link `[a.md](a.md)` names its target twice
            self.reported.add(key)
            self.problems.append("%s:%d: %s `%s`" % (rel, line, what, token))

    def scan_paths(self, rel, citing_dir, text, base_line):
        text = PLACEHOLDER.sub("*", text)  # `<x>` holds no newline: line numbers keep
        for m in PATH_CANDIDATE.finditer(text):
            token = classify_path(self.repo, m.group(0))
            if token is None:
                continue
            self.counts["paths"] += 1
            line = base_line + text.count("\n", 0, m.start())
            self.checked(rel, line, "path", token)
            if not check_path(self.repo, citing_dir, token):
                self.report(rel, line, "no such path", token)
        for m in FILE_CANDIDATE.finditer(text):
            name = m.group(0)
            if m.group(1) not in FILE_NAME_EXTENSIONS:
                continue
            if re.fullmatch(r"[A-Z][A-Z0-9_]*", name.rsplit(".", 1)[0]) and \
                    name not in self.repo.basenames:
                continue  # a placeholder: FILE.json
            self.counts["file names"] += 1
            line = base_line + text.count("\n", 0, m.start())
            self.checked(rel, line, "file", name)
            if not check_file_name(self.repo, citing_dir, name):
                self.report(rel, line, "no such file", name)

    def scan_markdown(self, rel, text):
        citing_dir = os.path.dirname(os.path.join(self.repo.root, rel))
        self.scan_paths(rel, citing_dir, text, 1)
        # Inline code spans and links, outside fenced blocks (blanked, keeping line numbers).
        lines = text.split("\n")
        fenced = False
        for i, line in enumerate(lines):
            if FENCE.match(line):
                fenced = not fenced
                lines[i] = ""
            elif fenced:
                lines[i] = ""
        prose = "\n".join(lines)
        for m in CODE_SPAN.finditer(prose):
            code = m.group("code")
            if "\n\n" in code:
                continue
            for name in identifiers_in_span(code.replace("\n", " ")):
                self.counts["identifiers"] += 1
                self.checked(rel, line_of(prose, m.start()), "identifier", name)
                if name not in self.repo.words():
                    self.report(rel, line_of(prose, m.start()), "unknown identifier", name)
        for m in LINK_TARGET.finditer(prose):
            target, _, anchor = m.group("target").partition("#")
            if "://" in target or target.startswith("mailto:"):
                continue
            line = line_of(prose, m.start())
            if target:
                # A link is relative to the citing file, as a Markdown viewer resolves it.
                self.counts["paths"] += 1
                self.checked(rel, line, "link", target)
                if not os.path.exists(os.path.join(citing_dir, target)):
                    self.report(rel, line, "no such link target", target)
                    continue
            if anchor and (target.endswith(".md") or not target):
                linked = os.path.join(citing_dir, target) if target else \
                    os.path.join(self.repo.root, rel)
                self.checked(rel, line, "anchor", m.group("target"))
                if anchor not in heading_anchors(linked):
                    self.report(rel, line, "no such heading", m.group("target"))

    def scan_header(self, rel, text):
        citing_dir = os.path.dirname(os.path.join(self.repo.root, rel))
        for n, line in enumerate(text.split("\n"), 1):
            stripped = line.lstrip()
            if stripped.startswith("//"):
                self.scan_paths(rel, citing_dir, stripped[2:], n)

    def run(self):
        root = self.repo.root
        docs = []
        if os.path.exists(os.path.join(root, "README.md")):
            docs.append("README.md")
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, "docs")):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(".md"):
                    docs.append(os.path.relpath(os.path.join(dirpath, name), root))
        for rel in docs:
            self.counts["files"] += 1
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                self.scan_markdown(rel, f.read())
        for folder in ("src", "include", "tools", "bench"):
            for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
                dirnames.sort()
                for name in sorted(filenames):
                    if name.endswith(".h"):
                        rel = os.path.relpath(os.path.join(dirpath, name), root)
                        self.counts["files"] += 1
                        with open(os.path.join(root, rel), encoding="utf-8") as f:
                            self.scan_header(rel, f.read())


def self_test(repo):
    """The rules must flag what is missing and pass what exists; guards a silent pass."""
    checker = Checker(repo)
    checker.scan_markdown("docs/self_test.md",
                          "See `src/loop/no_such_file_xyz.h`, loop/stmt.h and `Graph::add_node`;\n"
                          "`no_such_identifier_xyz()` and `KILN_NO_SUCH_VARIABLE`;\n"
                          "[a page](design/no_such_page_xyz.md), [the map](architecture.md).\n")
    checker.scan_header("src/self_test.h",
                        "// See codegen/cuda/no_such_mapping.h and ir/graph.h.\n")
    flagged = " ".join(checker.problems)
    expected = ["no_such_file_xyz.h", "no_such_identifier_xyz", "KILN_NO_SUCH_VARIABLE",
                "no_such_page_xyz.md", "no_such_mapping.h"]
    missing = [e for e in expected if e not in flagged]
    wrong = [p for p in checker.problems
             if any(ok in p for ok in ("stmt.h", "add_node", "graph.h", "architecture.md"))]
    if missing or wrong or len(checker.problems) != len(expected):
        sys.exit("check_references.py: self-test failed: missed %s, wrongly flagged %s" %
                 (missing, wrong))


def pipeline_stages(repo):
    """The stages in order, as src/compiler/options.h lists them once (KILN_STAGES)."""
    with open(os.path.join(repo.root, "src", "compiler", "options.h"), encoding="utf-8") as f:
        return re.findall(r'^\s*X\([a-z_]+, "([a-z-]+)"\)', f.read(), re.MULTILINE)


def check_stage_lists(repo):
    """Problems where a doc lists the pipeline's stages otherwise than KILN_STAGES: the table of
    docs/design/compiler.md (one row per stage, its first cell) and README's sentence "The
    stages, in order: ..."."""
    stages = pipeline_stages(repo)
    if len(stages) < 10:
        return ["src/compiler/options.h: KILN_STAGES lists %d stages; the check reads none" %
                len(stages)]
    problems = []
    with open(os.path.join(repo.root, "docs", "design", "compiler.md"), encoding="utf-8") as f:
        table = re.findall(r"^\| `([a-z-]+)` \|", f.read(), re.MULTILINE)
    if table != stages:
        problems.append("docs/design/compiler.md: the stage table lists %s; KILN_STAGES %s" %
                        (table, stages))
    with open(os.path.join(repo.root, "README.md"), encoding="utf-8") as f:
        readme = re.search(r"The stages, in order: ([^(]*)\(", f.read())
    listed = re.findall(r"`([a-z-]+)`", readme.group(1)) if readme else []
    if listed != stages:
        problems.append("README.md: 'The stages, in order' lists %s; KILN_STAGES %s" %
                        (listed, stages))
    return problems


def main():
    args = [a for a in sys.argv[1:] if a not in ("-v", "--verbose")]
    Checker.verbose = len(args) < len(sys.argv) - 1
    root = args[0] if args else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")
    repo = Repo(root)
    if not os.path.isdir(os.path.join(repo.root, "src")):
        sys.exit("check_references.py: %s is not Kiln's repository root" % repo.root)
    verbose, Checker.verbose = Checker.verbose, False
    self_test(repo)
    Checker.verbose = verbose
    checker = Checker(repo)
    checker.run()
    checker.problems.extend(check_stage_lists(repo))
    for problem in checker.problems:
        print(problem)
    c = checker.counts
    summary = "%d files: %d paths, %d file names, %d identifiers checked" % (
        c["files"], c["paths"], c["file names"], c["identifiers"])
    if checker.problems:
        print("%d stale references (%s)" % (len(checker.problems), summary))
        return 1
    print("docs references ok: " + summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
