"""The Colab notebooks execute headless, top to bottom, and are committed clean.

Skipped when nbclient / nbformat / ipykernel are missing (the `test` and
`notebooks` extras of setup.py install them).
"""

import pathlib
import re

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from grpo_jax.testing import objective_laws  # pylint: disable=g-import-not-at-top
from grpo_jax import objectives  # pylint: disable=g-import-not-at-top

COLAB = pathlib.Path(__file__).resolve().parent.parent / "colab"
NOTEBOOKS = ("new_variant.ipynb", "objectives.ipynb", "quickstart.ipynb")


def execute(name: str, *, timeout: int):
  """Runs every cell of colab/`name` in a fresh kernel from colab/.

  nbclient raises CellExecutionError (with the cell and traceback) on the
  first failing cell.
  """
  notebook = nbformat.read(COLAB / name, as_version=4)
  client = nbclient.NotebookClient(
      notebook, timeout=timeout, kernel_name="python3",
      resources={"metadata": {"path": str(COLAB)}})
  client.execute()
  return notebook


def stream_text(notebook) -> str:
  return "".join(output.get("text", "")
                 for cell in notebook.cells if cell.cell_type == "code"
                 for output in cell.get("outputs", ())
                 if output.get("output_type") == "stream")


def image_count(notebook) -> int:
  return sum("image/png" in output.get("data", {})
             for cell in notebook.cells if cell.cell_type == "code"
             for output in cell.get("outputs", ()))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_valid_v4_with_outputs_cleared(name):
  notebook = nbformat.read(COLAB / name, as_version=4)
  nbformat.validate(notebook)
  assert notebook.nbformat == 4
  for index, cell in enumerate(notebook.cells):
    if cell.cell_type == "code":
      assert not cell.outputs, f"{name} cell {index} has stored outputs"
      assert cell.execution_count is None, f"{name} cell {index}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_imports_the_library(name):
  source = "\n".join(c.source for c in nbformat.read(
      COLAB / name, as_version=4).cells if c.cell_type == "code")
  assert "from grpo_jax import" in source
  # The math lives in grpo_jax; a notebook only calls it.
  assert "jnp.minimum(" not in source and "jnp.clip(" not in source


def test_objectives_notebook_runs_and_draws_every_objective():
  notebook = execute("objectives.ipynb", timeout=300)
  text = stream_text(notebook)
  # The zero-variance middle group gets exactly zero advantages.
  assert "collapse rate: 0.333" in text
  # One curve per registered objective plus the notebook's variants
  # (dapo, r2vpo with lam=1, sapo with tau=4).
  assert f"drew {len(objectives.names()) + 3} curves" in text
  # The overview, then one figure per curve.
  assert image_count(notebook) == 1 + len(objectives.names()) + 3


def test_new_variant_notebook_registers_checks_trains_and_restores():
  """The researcher's first hour: a new clip registered in one cell passes
  every contract law, trains off policy beside ppo_clip on the tiny preset
  (the toy reward rises, the clip acts), is plotted, and the scoped
  registrations leave the registries as they were."""
  notebook = execute("new_variant.ipynb", timeout=300)
  text = stream_text(notebook)
  for law in objective_laws.OBJECTIVE_LAWS:
    assert f"passed {law.__name__}" in text
  assert "FAILED" not in text
  assert f"passed all {len(objective_laws.OBJECTIVE_LAWS)} laws" in text
  for name in ("ppo_clip", "abs_clip"):
    found = re.search(
        rf"trained {name} for (\d+) steps: reward ([\d.]+) -> ([\d.]+), "
        r"clip fraction up to ([\d.]+)", text)
    assert found, f"no training line for {name} in:\n{text}"
    steps, first, last, clip = found.groups()
    assert int(steps) >= 10
    assert float(last) > float(first) + 0.3, found.group(0)
    # Two minibatches per batch: the second step is off policy, so the clip
    # cuts some tokens (on policy it never would).
    assert float(clip) > 0.0, found.group(0)
  # Closing the scope removed the notebook's objective and reward function:
  # the registries end as they began.
  for kind, added in (("objectives", "abs_clip"),
                      ("reward functions", "digit_share")):
    before = re.search(rf"^{kind}: (.*)$", text, re.M)
    after = re.search(rf"^{kind} restored: (.*)$", text, re.M)
    assert before and after, text
    assert after.group(1) == before.group(1)
    assert added not in after.group(1).split(", ")
  assert image_count(notebook) == 1


@pytest.mark.real_model
@pytest.mark.slow  # CI time; run with -m slow
def test_quickstart_notebook_runs():
  notebook = execute("quickstart.ipynb", timeout=600)
  text = stream_text(notebook)
  assert "advantages" in text
  assert "trained 4 steps" in text
  assert image_count(notebook) >= 1
