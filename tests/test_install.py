"""A wheel install (``pip install .``, not ``-e``) builds and trains.

The wheel holds `grpo_jax` only: `configs/`, `experiments/` and `tests/` stay
in the repository, so the library must not need them. These tests build the
wheel offline from a copy of the checkout, install it into a directory of
its own, and train one step of the tiny preset from a config made with
`grpo_jax.config`, in a fresh interpreter whose working directory is not the
repository (as on Colab after ``pip install git+...``).
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

pytest.importorskip("setuptools")

REPO = pathlib.Path(__file__).resolve().parent.parent
# What a fresh clone lacks: build outputs, caches, the VCS.
COPY_IGNORES = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
    "runs", ".venv", "*.pyc")
PIP_ENV = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1")


def pip(*args, cwd):
  """`python -m pip` offline (no index); fails the test with pip's output."""
  result = subprocess.run(
      [sys.executable, "-m", "pip", *args, "--no-index", "--no-deps", "-q"],
      cwd=cwd, env=PIP_ENV, capture_output=True, text=True, check=False)
  assert result.returncode == 0, (
      f"pip {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  """(source copy, wheel path): the wheel of a copy of the checkout, built
  without network or build isolation (setuptools from this environment).
  The copy keeps the build's `build/` and egg-info out of the checkout."""
  root = tmp_path_factory.mktemp("wheel")
  source = root / "src"
  shutil.copytree(REPO, source, ignore=COPY_IGNORES)
  pip("wheel", "--no-build-isolation", "-w", str(root / "dist"), str(source),
      cwd=root)
  wheels = sorted((root / "dist").glob("grpo_jax-*.whl"))
  assert len(wheels) == 1, wheels
  return source, wheels[0]


def test_wheel_holds_the_library_and_its_data_only(built):
  source, wheel = built
  names = set(zipfile.ZipFile(wheel).namelist())
  tops = {name.split("/")[0] for name in names}
  # No configs/, experiments/, tests/ or colab/: the package and its metadata.
  assert not tops & {"configs", "experiments", "tests", "colab"}, tops
  assert {t for t in tops if not t.endswith(".dist-info")} == {"grpo_jax"}
  # Every module of the package (a subpackage without __init__.py would be
  # silently left out by find_packages).
  modules = {p.relative_to(source).as_posix()
             for p in (source / "grpo_jax").rglob("*.py")}
  assert modules - names == set()
  # The embedded model's tokenizer, package data.
  tokenizers = source / "grpo_jax" / "models" / "tokenizers"
  data = {p.relative_to(source).as_posix()
          for p in tokenizers.rglob("*") if p.is_file()}
  assert data, "no tokenizer files in the checkout"
  assert {"tokenizer.json", "tokenizer_config.json"} <= {
      pathlib.PurePosixPath(d).name for d in data}
  assert data - names == set()
  # The planner's architectures, package data too.
  architectures = {
      p.relative_to(source).as_posix()
      for p in (source / "grpo_jax" / "models" / "architectures").glob("*.json")}
  assert len(architectures) >= 5 and architectures - names == set()


TRAIN_ONE_STEP = textwrap.dedent("""
    import json, os, sys
    site, workdir = sys.argv[1:3]
    site = os.path.realpath(site) + os.sep

    import grpo_jax
    assert os.path.realpath(grpo_jax.__file__).startswith(site), (
        grpo_jax.__file__)
    try:
      import configs
    except ImportError:
      pass
    else:
      raise AssertionError(f"configs is importable: {configs.__file__}")

    from grpo_jax import config as config_lib
    from grpo_jax.runtime import metrics
    from grpo_jax import train

    config = config_lib.finalize(config_lib.get_base_config(), "tiny")
    config.train.num_steps = 1
    train.train(config, workdir)

    # Nothing came from the checkout (the editable install's finder).
    outside = sorted(
        name for name, module in sys.modules.items()
        if (name == "grpo_jax" or name.startswith("grpo_jax."))
        and getattr(module, "__file__", None)
        and not os.path.realpath(module.__file__).startswith(site))
    assert not outside, outside
    assert "configs" not in sys.modules and "experiments" not in sys.modules
    records = metrics.read(os.path.join(workdir, metrics.METRICS_FILE))
    print("RECORDS", json.dumps(records))
""")


def test_wheel_install_builds_and_trains_the_tiny_preset(built, tmp_path):
  _, wheel = built
  site = tmp_path / "site"
  pip("install", "--target", str(site), str(wheel), cwd=tmp_path)
  assert not (site / "configs").exists() and not (site / "tests").exists()
  workdir = tmp_path / "run"
  # The wheel's grpo_jax ahead of the editable install; cwd outside the
  # repository, so neither `configs` nor the checkout's grpo_jax is on the
  # path. Compile cheaply, as tests/conftest.py does.
  env = dict(os.environ, PYTHONPATH=str(site),
             JAX_DISABLE_MOST_OPTIMIZATIONS="1")
  result = subprocess.run(
      [sys.executable, "-c", TRAIN_ONE_STEP, str(site), str(workdir)],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
      check=False)
  assert result.returncode == 0, result.stdout + result.stderr
  line = next(text for text in result.stdout.splitlines()
              if text.startswith("RECORDS "))
  records = json.loads(line[len("RECORDS "):])
  assert [r["step"] for r in records] == [0]
  assert "reward/total" in records[0] and "loss" in records[0]
  with open(workdir / "metrics.jsonl") as f:
    assert len([text for text in f if text.strip()]) == 1
