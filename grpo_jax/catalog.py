"""What a config can choose, as text: the variants (configs/*.py) and every
registered component (name, paper, one line), and the components one config
picks. ``python -m experiments.train --list`` and ``--dry_run`` print them.

The components come from the registries (`registry.Registry`): the paper
from the entry's metadata (``paper``, where its kind declares one), the line
from its function's docstring. The variants' lines are their docstrings'
first paragraphs, read without importing them.
"""

import ast
import glob
import os
from typing import Callable, Iterator, NamedTuple, Tuple


class Kind(NamedTuple):
  """One kind of component: its title, the config field that chooses one,
  and its registry (imported when asked for: this module stays cheap)."""
  title: str
  field: str
  registry: Callable


def _registry(module: str, name: str) -> Callable:
  def get():
    import importlib  # pylint: disable=g-import-not-at-top
    return getattr(importlib.import_module(module), name)
  return get


# In pipeline order (DESIGN.md, "One training step, as data").
KINDS: Tuple[Kind, ...] = (
    Kind("tasks", "data.task", _registry("grpo_jax.data", "TASKS")),
    Kind("reward functions", "rewards.functions",
         _registry("grpo_jax.rewards.verifiers", "VERIFIERS")),
    Kind("reward shapers", "rewards.shapers.<name>",
         _registry("grpo_jax.rewards.shapers", "SHAPERS")),
    Kind("selections", "select.name",
         _registry("grpo_jax.strategies", "SELECTIONS")),
    Kind("budgets", "budget.name", _registry("grpo_jax.strategies", "BUDGETS")),
    Kind("group strategies", "groups.name",
         _registry("grpo_jax.strategies", "GROUP_STRATEGIES")),
    Kind("member filters", "filter.name",
         _registry("grpo_jax.strategies", "MEMBER_FILTERS")),
    Kind("advantage estimators", "advantage.name",
         _registry("grpo_jax.advantages", "ESTIMATORS")),
    Kind("credit rules", "credit.name", _registry("grpo_jax.credit", "CREDIT")),
    Kind("row strategies", "rows.name",
         _registry("grpo_jax.strategies", "ROW_STRATEGIES")),
    Kind("objectives", "objective.name",
         _registry("grpo_jax.objectives", "OBJECTIVES")),
    Kind("aggregations", "objective.kwargs.aggregation",
         _registry("grpo_jax.aggregation", "AGGREGATIONS")),
    Kind("corrections", "corrections.<name>",
         _registry("grpo_jax.objectives.corrections", "CORRECTIONS")),
    Kind("KL estimators", "kl.estimator",
         _registry("grpo_jax.kl", "KL_ESTIMATORS")),
)


class Line(NamedTuple):
  """One row of a listing."""
  name: str
  paper: str
  summary: str


def first_paragraph(doc: str) -> str:
  """A docstring's first paragraph, on one line."""
  return " ".join((doc or "").strip().split("\n\n")[0].split())


def entries(kind: Kind) -> Iterator[Line]:
  """Every entry of `kind`'s registry: name, paper ("" where none is
  declared) and the first paragraph of its docstring."""
  for entry in kind.registry().entries():
    yield Line(entry.name, getattr(entry.meta, "paper", "") or "",
               first_paragraph(entry.fn.__doc__))


def variants(configs_dir: str) -> Iterator[Line]:
  """The variant files in `configs_dir`: name (the file's), paper (its
  docstring's parenthesis after the name, e.g. "arXiv 2503.14476") and the
  first paragraph of its docstring."""
  for path in sorted(glob.glob(os.path.join(configs_dir, "*.py"))):
    name = os.path.splitext(os.path.basename(path))[0]
    if name.startswith("_"):
      continue
    with open(path) as f:
      doc = ast.get_docstring(ast.parse(f.read())) or ""
    summary = first_paragraph(doc)
    yield Line(name, _paper_of(summary), summary)


def _paper_of(summary: str) -> str:
  """"DAPO (arXiv 2503.14476): ..." -> "arXiv 2503.14476": the
  parenthesis before the first colon, when there is one."""
  head = summary.split(":", 1)[0]
  if "(" in head and head.rstrip().endswith(")"):
    return head[head.index("(") + 1:head.rstrip().rindex(")")]
  return ""


def format_lines(lines, *, width: int = 110) -> str:
  """Indented rows ``name  summary  [paper]``, the summary cut to fit
  `width` columns (but never below 50 characters; the paper cut to 60,
  and left out where the summary names it already)."""
  lines = list(lines)
  column = max((len(line.name) for line in lines), default=0) + 2
  rows = []
  for line in lines:
    paper = line.paper if len(line.paper) <= 60 else line.paper[:57] + "..."
    paper = (f"  [{paper}]" if line.paper
             and line.paper not in line.summary else "")
    room = max(width - 2 - column - len(paper), 50)
    summary = line.summary
    if len(summary) > room:
      summary = summary[:room - 3].rstrip() + "..."
    rows.append(f"  {line.name:<{column}}{summary}{paper}".rstrip())
  return "\n".join(rows)


def format_catalog(configs_dir: str, *, width: int = 110) -> str:
  """The variants, then every kind of component, as `--list` prints them."""
  blocks = [f"variants (--config={os.path.relpath(configs_dir)}/<name>.py, "
            ":tiny for a seconds-long run on a random tiny model):\n"
            + format_lines(variants(configs_dir), width=width)]
  for kind in KINDS:
    blocks.append(f"{kind.title} (--config.{kind.field}):\n"
                  + format_lines(entries(kind), width=width))
  return "\n\n".join(blocks)


def fields(config, prefix: str = "") -> Iterator[Tuple[str, object]]:
  """(dotted path, value) of every leaf field of `config`, sorted: the
  names ``--config.<path>=value`` overrides (an empty group is a leaf,
  ``{}``)."""
  for key in sorted(config.keys()):
    value = config[key]
    path = f"{prefix}{key}"
    if hasattr(value, "keys") and len(value):
      yield from fields(value, prefix=path + ".")
    else:
      yield path, (dict(value) if hasattr(value, "keys") else value)


def chosen(config) -> Iterator[Tuple[str, Line]]:
  """(field, Line) of every component `config` names, in pipeline order:
  a `--dry_run`'s list of what the run would build."""
  picks = {
      "data.task": (config.data.task,),
      "rewards.functions": tuple(config.rewards.functions),
      "rewards.shapers.<name>": tuple(config.rewards.shapers),
      "select.name": (config.select.name,),
      "budget.name": (config.budget.name,),
      "groups.name": (config.groups.name,),
      "filter.name": (config.filter.name,),
      "advantage.name": (config.advantage.name,),
      "credit.name": (config.credit.name,),
      "rows.name": (config.rows.name,),
      "objective.name": (config.objective.name,),
      "objective.kwargs.aggregation": (config.objective.kwargs.get(
          "aggregation", ""),),
      "corrections.<name>": tuple(config.corrections),
      "kl.estimator": (config.kl.estimator,) if config.kl.beta > 0 else (),
  }
  for kind in KINDS:
    registry = kind.registry()
    for name in picks[kind.field]:
      if name and name in registry:
        entry = registry.entry(name)
        field = kind.field.replace("<name>", name)
        yield field, Line(name, getattr(entry.meta, "paper", "") or "",
                          first_paragraph(entry.fn.__doc__))
      elif kind.field == "rewards.functions" and ":" in name:  # by reference
        from grpo_jax.rewards import references  # pylint: disable=g-import-not-at-top
        yield kind.field, Line(name, "", first_paragraph(
            references.parse(name).resolve().__doc__))
