"""The documentation is tested like code.

1. `mkdocs build --strict` succeeds (a broken link, a missing page, a nav entry
   without a file or a docstring mkdocstrings cannot parse fails it), and the
   rendered API page shows the docstring summary of every public name (a
   docstring set at run time, e.g. `namedtuple.__doc__ = ...`, is invisible to
   mkdocstrings' static analysis and would be missing there).
2. Every fenced ```python block of every docs/**/*.md page and of README.md is
   executed. The blocks of one page run in order in one shared namespace, so a
   page reads as one story; each page is a separate test, so a failure names
   the page, and tracebacks point at the page's own line numbers. Shell
   commands go in ```console blocks, which are not run; output shown to the
   reader goes in ```text blocks. Pages run in a scratch working directory.
   Pages share a pytest worker process (TensorFlow is imported once); a page
   that needs a fresh process (e.g. it configures logical devices or other
   process-wide TensorFlow state) says so with the HTML comment
   `<!-- docs-test: own-process -->` anywhere in its text.
3. Every name in `tf_vtrace.__all__` has a docstring and a `::: tf_vtrace.NAME`
   entry in docs/api.md, and every such entry names something that exists.
4. Every page under docs/ is in the mkdocs nav.
"""
import html
import inspect
import os
import pathlib
import re
import subprocess
import sys

import api_summary
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
API_PAGE = DOCS / "api.md"


def _pages_with_code():
    pages = sorted(DOCS.rglob("*.md"))
    readme = ROOT / "README.md"
    if readme.exists():
        pages.append(readme)
    return pages


_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n]*)$")


def python_blocks(text):
    """Yields (first_line_number, source) for each fenced python block.

    Fences may be indented (inside admonitions, lists or tabs); the block is
    dedented by the fence's indentation. The info string's first word must be
    `python` or `py` (attributes such as `title="..."` may follow).
    """
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence = match.group("indent"), match.group("fence")
        info = match.group("info").strip().lstrip("{").strip()
        words = re.split(r"[\s{}]+", info) if info else [""]
        language = words[0].lstrip(".").lower()
        closing = re.compile(
            r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        body, j = [], i + 1
        while j < len(lines) and not closing.match(lines[j]):
            line = lines[j]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            j += 1
        if j == len(lines):
            raise ValueError(f"unclosed code fence opened on line {i + 1}")
        if language in ("python", "py"):
            yield i + 2, "\n".join(body) + "\n"
        i = j + 1


def _page_id(path):
    return str(path.relative_to(ROOT))


OWN_PROCESS_MARKER = "<!-- docs-test: own-process -->"

_RUNNER = """
import json, sys
page, blocks = sys.argv[1], json.load(open(sys.argv[2], encoding="utf-8"))
namespace = {"__name__": "__docs__"}
for first_line, source in blocks:
    exec(compile("\\n" * (first_line - 1) + source, page, "exec"), namespace)
"""


def run_blocks(page, blocks):
    """Runs a page's blocks in order in one namespace, in this process."""
    namespace = {"__name__": "__docs__"}
    for first_line, source in blocks:
        # Pad with blank lines so traceback line numbers are the page's own.
        code = compile("\n" * (first_line - 1) + source, str(page), "exec")
        exec(code, namespace)


def run_blocks_in_own_process(page, blocks, workdir):
    """Runs a page's blocks in a fresh interpreter; returns the CompletedProcess."""
    import json
    blocks_file = workdir / "blocks.json"
    blocks_file.write_text(json.dumps(blocks), encoding="utf-8")
    runner = workdir / "run_page.py"
    runner.write_text(_RUNNER, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(runner), str(page), str(blocks_file)],
        cwd=workdir, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def _reset_process_state():
    """Undoes global state a page may leave behind for the next page."""
    if "keras" in sys.modules:
        import keras
        keras.mixed_precision.set_global_policy("float32")
        keras.backend.clear_session()
    if "tensorflow" in sys.modules:
        import tensorflow as tf
        tf.config.run_functions_eagerly(False)


@pytest.mark.parametrize("page", _pages_with_code(), ids=_page_id)
def test_page_code_blocks_run(page, tmp_path, monkeypatch):
    text = page.read_text(encoding="utf-8")
    blocks = list(python_blocks(text))
    if not blocks:
        pytest.skip("no python blocks")
    # Files a page writes (checkpoints, SavedModels) land in a scratch folder.
    monkeypatch.chdir(tmp_path)
    if OWN_PROCESS_MARKER in text:
        result = run_blocks_in_own_process(page, blocks, tmp_path)
        assert result.returncode == 0, (
            f"{page} failed in its own process:\n"
            + result.stdout[-5000:] + result.stderr[-10000:])
        return
    try:
        run_blocks(page, blocks)
    finally:
        _reset_process_state()


def test_block_extraction_handles_indented_and_titled_fences():
    text = (
        "intro\n"
        "```python\n"
        "a = 1\n"
        "```\n"
        "!!! note\n"
        "    ```python title=\"x.py\"\n"
        "    b = a + 1\n"
        "    ```\n"
        "```console\n"
        "$ make test\n"
        "```\n"
        "````text\n"
        "```python\n"
        "not code\n"
        "```\n"
        "````\n")
    assert list(python_blocks(text)) == [(3, "a = 1\n"), (7, "b = a + 1\n")]


def test_own_process_runner_shares_namespace_and_reports_page_lines(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        f"{OWN_PROCESS_MARKER}\n```python\nx = 41\n```\ntext\n"
        "```python\nassert x == 41\nassert x == 42, 'boom'\n```\n",
        encoding="utf-8")
    blocks = list(python_blocks(page.read_text(encoding="utf-8")))
    result = run_blocks_in_own_process(page, blocks, tmp_path)
    assert result.returncode != 0
    assert f'File "{page}", line 8' in result.stderr and "boom" in result.stderr


def _api_entries():
    return api_summary.api_entries(API_PAGE.read_text(encoding="utf-8"))


def test_api_page_lists_every_entry_with_its_signature():
    """docs/api.md reads as plain Markdown too: its "At a glance" list is
    what tests/api_summary.py generates from the code's signatures."""
    text = API_PAGE.read_text(encoding="utf-8")
    assert api_summary.current_block(text) == api_summary.generated_block(text), (
        "docs/api.md's At-a-glance list is out of date with the code: run "
        "`python tests/api_summary.py`")


def _public_names():
    import tf_vtrace
    return list(tf_vtrace.__all__)


def _is_auto_namedtuple_doc(obj, doc):
    fields = getattr(obj, "_fields", None)
    return fields is not None and doc == f"{obj.__name__}({', '.join(fields)})"


@pytest.mark.parametrize("name", _public_names())
def test_public_name_is_documented(name):
    import tf_vtrace
    obj = getattr(tf_vtrace, name)
    doc = inspect.getdoc(obj)
    assert doc and doc.strip(), f"tf_vtrace.{name} has no docstring"
    assert not _is_auto_namedtuple_doc(obj, doc), (
        f"tf_vtrace.{name} only has namedtuple's generated docstring")
    assert f"tf_vtrace.{name}" in _api_entries(), (
        f"docs/api.md has no `::: tf_vtrace.{name}` entry")


def _griffe_objects():
    """(path, griffe object) for each public name and its public members."""
    import griffe

    import tf_vtrace
    package = griffe.load("tf_vtrace", search_paths=[str(ROOT)])
    for name in tf_vtrace.__all__:
        obj = package[name]
        yield f"tf_vtrace.{name}", obj
        if obj.is_class or obj.is_module:
            for member_name, member in obj.members.items():
                if not member_name.startswith("_") and not member.is_alias:
                    yield f"tf_vtrace.{name}.{member_name}", member


def test_docstring_examples_render_as_code():
    """A doctest must sit in an `Examples:` section that griffe recognizes.

    Google style wants the section's content indented right under the header:
    with a blank line after `Examples:`, griffe parses the header and the
    doctest as plain text, and Markdown turns `>>>` into nested block quotes.
    """
    misparsed = []
    for path, obj in _griffe_objects():
        if not obj.docstring:
            continue
        sections = obj.docstring.parse("google", warnings=False)
        if any(section.kind.value == "text" and ">>>" in section.value
               for section in sections):
            misparsed.append(path)
    assert not misparsed, (
        f"doctests rendered as text (not as an Examples section) in {misparsed}: "
        "put the indented `>>>` lines directly under `Examples:`, with no blank "
        "line between")


# Modules that need process-wide settings (tf_vtrace.tf_agents: TF-Agents under
# TF_USE_LEGACY_KERAS=1) are not imported here; their entries are checked by
# static analysis (griffe, as mkdocstrings reads them).
OWN_PROCESS_MODULES = ("tf_vtrace.tf_agents",)


def _in_own_process_module(entry):
    return any(entry == m or entry.startswith(m + ".") for m in OWN_PROCESS_MODULES)


def _static_object(entry):
    import griffe
    package = griffe.load("tf_vtrace", search_paths=[str(ROOT)])
    return package[entry[len("tf_vtrace."):]]


def test_api_page_entries_exist():
    import importlib
    for entry in _api_entries():
        if _in_own_process_module(entry):
            assert _static_object(entry).docstring, f"{entry} has no docstring"
            continue
        module_name, _, attribute = entry.rpartition(".")
        try:
            module = importlib.import_module(entry)
            continue  # the entry is a module
        except ImportError:
            module = importlib.import_module(module_name)
        assert hasattr(module, attribute), f"docs/api.md documents missing {entry}"


def _nav_files(nav):
    for item in nav:
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            for value in item.values():
                if isinstance(value, str):
                    yield value
                else:
                    yield from _nav_files(value)


class _ConfigLoader(yaml.SafeLoader):
    """Reads mkdocs.yml, ignoring tags such as !!python/name: and !ENV."""


_ConfigLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)
_ConfigLoader.add_multi_constructor("!", lambda *_: None)


def test_every_page_is_in_the_nav():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"),
                       Loader=_ConfigLoader)
    in_nav = set(_nav_files(config["nav"]))
    pages = {str(p.relative_to(DOCS)).replace(os.sep, "/") for p in DOCS.rglob("*.md")}
    assert pages - in_nav == set(), "pages missing from mkdocs.yml nav"


def _visible_text(page_html):
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", page_html, flags=re.S)
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"\s+", " ", html.unescape(text))


def _summary(doc):
    first = doc.strip().split("\n\n")[0]
    return re.sub(r"\s+", " ", first.replace("`", "").replace("*", "")).strip()


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    """Runs `mkdocs build --strict` once per worker; returns (result, site)."""
    site = tmp_path_factory.mktemp("docs") / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return result, site


def test_mkdocs_build_strict(built_site):
    result, _ = built_site
    assert result.returncode == 0, (
        "mkdocs build --strict failed:\n" + result.stdout + result.stderr)


def test_api_page_shows_every_public_docstring(built_site):
    result, site = built_site
    if result.returncode != 0:
        pytest.skip("the strict build failed (see test_mkdocs_build_strict)")
    import tf_vtrace
    rendered = _visible_text((site / "api" / "index.html").read_text(encoding="utf-8"))
    missing = [
        name for name in tf_vtrace.__all__
        if _summary(inspect.getdoc(getattr(tf_vtrace, name)) or "") not in rendered]
    missing += [
        entry for entry in _api_entries() if _in_own_process_module(entry)
        and _summary(_static_object(entry).docstring.value) not in rendered]
    assert not missing, (
        "the API page does not show the docstring of "
        f"{missing}: mkdocstrings reads docstrings statically, so a docstring "
        "assigned at run time (e.g. `Foo.__doc__ = ...` on a namedtuple) is "
        "lost; define a class with the docstring in its body instead")
