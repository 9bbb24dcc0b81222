"""The package's layout, read from its files (DESIGN.md, "Layout"): no
import cycle among grpo_jax's modules (imports inside functions counted),
short files, few modules at the top, no step forks named `*_rollout`, a
README that is a guide (short, no commit hashes), tests named by subject.
"""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "grpo_jax"


def module_names():
  """Dotted name -> path of every module under grpo_jax/."""
  names = {}
  for path in PACKAGE.rglob("*.py"):
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
      parts = parts[:-1]
    names[".".join(parts)] = path
  return names


def imported(name, path, modules):
  """The grpo_jax modules `name` imports anywhere in its file; a module's
  own parent packages aside (a package re-exporting its children)."""
  package = name if path.name == "__init__.py" else name.rpartition(".")[0]
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
      targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules
                 else base for a in node.names]
    else:
      continue
    for target in targets:
      while target and target not in modules:
        target = target.rpartition(".")[0]
      if target and target != name and not name.startswith(target + "."):
        found.add(target)
  return found


def cycles(graph):
  """The strongly connected components of more than one node (Tarjan)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in graph[v]:
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return found


def test_no_import_cycle_among_modules():
  modules = module_names()
  graph = {m: imported(m, p, modules) for m, p in modules.items()}
  assert cycles(graph) == []


def test_cycle_finder_finds_a_function_level_cycle(tmp_path):
  # The check must be able to fail: two modules importing each other, one
  # of them inside a function.
  a = tmp_path / "a.py"
  b = tmp_path / "b.py"
  a.write_text("from grpo_jax import b\n")
  b.write_text("def f():\n  from grpo_jax import a\n")
  modules = {"grpo_jax.a": a, "grpo_jax.b": b}
  graph = {m: imported(m, p, modules) for m, p in modules.items()}
  assert cycles(graph) == [["grpo_jax.a", "grpo_jax.b"]]


def test_no_file_over_600_lines():
  long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
          if (n := len(p.read_text().splitlines())) > 600}
  assert long == {}


def test_at_most_12_modules_at_the_top_and_no_step_forks():
  top = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
  assert len(top) <= 12, sorted(top)
  assert [str(p) for p in PACKAGE.rglob("*_rollout.py")] == []


def test_readme_is_a_short_guide_without_commit_hashes():
  lines = (ROOT / "README.md").read_text().splitlines()
  assert len(lines) <= 450
  assert [l for l in lines if re.search(r"`[0-9a-f]{7,40}`", l)] == []
  assert lines[0] == "# grpo_jax"
  assert "## Quickstart" in lines


@pytest.mark.parametrize("pattern", [r"wave\d", r"issue\d"])
def test_test_files_are_named_by_subject(pattern):
  assert [p.name for p in (ROOT / "tests").rglob("test_*.py")
          if re.search(pattern, p.name)] == []
