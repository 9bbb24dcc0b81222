"""The Colab notebooks execute headless, top to bottom, and are committed
clean; each opens in Colab from its repository, installs grpo_jax there (and
nothing in a checkout), prepares the runtime before jax's first import, and
the quickstart notebook states its config's own numbers.

Skipped when nbclient / nbformat / ipykernel are missing (the `test` and
`notebooks` extras of setup.py install them).
"""

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from configs import quickstart as quickstart_config  # pylint: disable=g-import-not-at-top
from grpo_jax import config as config_lib  # pylint: disable=g-import-not-at-top
from grpo_jax.testing import objective_laws  # pylint: disable=g-import-not-at-top
from grpo_jax import objectives  # pylint: disable=g-import-not-at-top

COLAB = pathlib.Path(__file__).resolve().parent.parent / "colab"
NOTEBOOKS = ("new_variant.ipynb", "objectives.ipynb", "quickstart.ipynb")


BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
# The install cell's one definition of the repository: owner/name on GitHub.
REPO_URL = re.compile(
    r'^REPO_URL = "(https://github\.com/([\w.-]+/[\w.-]+))"$', re.M)


def read(name: str):
  return nbformat.read(COLAB / name, as_version=4)


def code_sources(notebook) -> list[str]:
  return [c.source for c in notebook.cells if c.cell_type == "code"]


def markdown(notebook) -> str:
  return "\n".join(c.source for c in notebook.cells
                   if c.cell_type == "markdown")


def repository(notebook) -> tuple[str, str]:
  """(REPO_URL, its owner/name), defined exactly once in the notebook."""
  found = [m.groups() for source in code_sources(notebook)
           for m in REPO_URL.finditer(source)]
  assert len(found) == 1, found
  return found[0]


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


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_first_cell_opens_this_notebook_in_colab_from_repo_url(name):
  notebook = read(name)
  _, path = repository(notebook)
  first = notebook.cells[0]
  assert first.cell_type == "markdown"
  link = f"https://colab.research.google.com/github/{path}/blob/main/colab/{name}"
  assert f"[![Open In Colab]({BADGE})]({link})" in first.source, first.source


def test_the_notebooks_share_one_repository_install_and_runtime_cell():
  # One text to maintain: a fix to one notebook's setup reaches all three.
  setups = {tuple(code_sources(read(name))[:2]) for name in NOTEBOOKS}
  assert len(setups) == 1
  assert len({repository(read(name)) for name in NOTEBOOKS}) == 1


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_install_cell_installs_from_repo_url_with_no_placeholder(name):
  install = code_sources(read(name))[0]
  assert "REPO_URL = " in install
  for trap in ("<owner>", "-e ..", "%pip", "!pip", "!git"):
    assert trap not in install, trap
  assert 'f"grpo_jax @ git+{REPO_URL}"' in install


def run_install_cell(monkeypatch, *, importable: bool, returncode: int = 0):
  """Runs the install cell here with pip replaced by a recorder; grpo_jax
  looks missing until pip ran when not `importable`. Returns pip's calls."""
  source = code_sources(read("quickstart.ipynb"))[0]
  calls = []

  def pip(args, **unused_kwargs):
    calls.append(list(args))
    return subprocess.CompletedProcess(args, returncode, "", "no repository")

  real_find_spec = importlib.util.find_spec

  def find_spec(name, *args):
    if name == "grpo_jax" and not importable and not calls:
      return None
    return real_find_spec(name, *args)

  monkeypatch.setattr(subprocess, "run", pip)
  monkeypatch.setattr(importlib.util, "find_spec", find_spec)
  exec(compile(source, "install cell", "exec"), {})  # pylint: disable=exec-used
  return calls


def test_the_install_cell_installs_nothing_where_grpo_jax_is_importable(
    monkeypatch):
  # A checkout installed with `pip install -e .`, as in CI: offline, no pip.
  assert run_install_cell(monkeypatch, importable=True) == []


def test_the_install_cell_pip_installs_repo_url_where_grpo_jax_is_missing(
    monkeypatch):
  url, _ = repository(read("quickstart.ipynb"))
  assert run_install_cell(monkeypatch, importable=False) == [
      [sys.executable, "-m", "pip", "install", "-q", f"grpo_jax @ git+{url}"]]


def test_a_failed_install_names_repo_url_and_shows_pips_error(monkeypatch):
  with pytest.raises(RuntimeError, match=r"REPO_URL = (.|\n)*no repository"):
    run_install_cell(monkeypatch, importable=False, returncode=1)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_runtime_cell_prepares_before_jax_and_prints_its_devices(name):
  sources = code_sources(read(name))
  runtime = sources[1]
  assert "accelerators.prepare()" in runtime
  assert re.search(r"^print\(.*jax\.devices\(\)\)$", runtime, re.M), runtime
  # A wheel that prepare installs after jax's first import would need a
  # restart: nothing before it imports jax.
  before = sources[0] + runtime.split("accelerators.prepare()")[0]
  assert not re.search(r"^\s*(import jax|from jax)", before, re.M)


def test_the_quickstart_notebook_states_its_configs_numbers():
  """Parsed from the notebook's text and compared with configs/quickstart.py,
  so the text cannot drift from the config again."""
  config = quickstart_config.get_config()
  notebook = read("quickstart.ipynb")
  text = markdown(notebook)
  scale = re.findall(r"(\d+) steps of (\d+) prompts x (\d+) completions",
                     text)
  assert scale, text
  assert set(scale) == {(str(config.train.num_steps),
                         str(config.rollout.num_prompts),
                         str(config.rollout.num_generations))}
  tokens = re.findall(r"up to (\d+) new tokens", text)
  assert tokens and set(tokens) == {str(config.rollout.max_new_tokens)}
  every = config.eval.every
  evaluations = re.findall(r"on the (\d+) held-out problems measured after\s+"
                           r"steps (\d+) and (\d+)", text)
  assert evaluations == [(str(config.eval.num_problems), str(every),
                          str(2 * every))]
  assert 2 * every == config.train.num_steps  # two evaluations, as stated
  learning_rates = re.findall(r"\blr (\d[\d.]*(?:e-?\d+)?)", text)
  assert learning_rates and {float(lr) for lr in learning_rates} == {
      config.optimizer.learning_rate}
  # The notebook builds the config the way configs/quickstart.py does (on
  # Colab configs/ is not installed), and gets the same one.
  built = "config_lib.use_quickstart_scale(config_lib.get_base_config())"
  assert any(built in source for source in code_sources(notebook))
  assert (config_lib.use_quickstart_scale(config_lib.get_base_config())
          .to_dict() == config.to_dict())


def test_objectives_notebook_runs_and_draws_every_objective():
  notebook = execute("objectives.ipynb", timeout=300)
  text = stream_text(notebook)
  assert re.search(r"^jax devices: \[.+\]$", text, re.M), text
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
  assert re.search(r"^jax devices: \[.+\]$", text, re.M), text
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
  config = quickstart_config.get_config()
  assert (f"quickstart: {config.train.num_steps} steps of "
          f"{config.rollout.num_prompts} prompts x "
          f"{config.rollout.num_generations} completions, up to "
          f"{config.rollout.max_new_tokens} new tokens") in text
  assert image_count(notebook) >= 1
