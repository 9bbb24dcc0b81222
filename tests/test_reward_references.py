"""Tests for reward functions named by reference (grpo_jax.rewards.references)
and for scripts that start the reward workers (grpo_jax.rewards.workers):
``rewards.functions`` takes ``module.path:function`` and
``path/to/file.py:function``, checked before any compute; a referenced
function runs in the worker processes, from the command line, and a run
trained with one evaluates from its checkpoint; a driver script without a
main guard stops before any model loads, one with it trains.
"""

import json
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

from configs import grpo as grpo_config
from grpo_jax import catalog
from grpo_jax import rewards
from grpo_jax import testing
from grpo_jax import train as train_lib
from grpo_jax.rewards import references
from grpo_jax.rewards import workers
from grpo_jax.runtime import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Not a mean of 0/1 rewards over the tiny config's 8 completions, so seen
# in the metrics it can only have come from the referenced function.
CONSTANT = 0.37
CONSTANT_REWARD = f"""
def constant(prompts, completions, answers):
  return [{CONSTANT}] * len(completions)
"""


def _write(path, text):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(textwrap.dedent(text))
  return path


def _scored(fn, completions):
  n = len(completions)
  return fn(["p"] * n, completions, ["8"] * n)


def test_a_module_reference_resolves_to_the_module_function(tmp_path,
                                                            monkeypatch):
  _write(tmp_path / "ref_pkg_a" / "__init__.py", "")
  _write(tmp_path / "ref_pkg_a" / "lengths.py", """
      def twice_length(prompts, completions, answers):
        return [2.0 * len(c) for c in completions]
      """)
  monkeypatch.syspath_prepend(str(tmp_path))
  fn = rewards.get("ref_pkg_a.lengths:twice_length")
  import ref_pkg_a.lengths  # pylint: disable=g-import-not-at-top
  assert references.parse("ref_pkg_a.lengths:twice_length").resolve() \
      is ref_pkg_a.lengths.twice_length
  assert _scored(fn, ["ab", "abcd"]) == [4.0, 8.0]


@pytest.mark.parametrize("relative", [False, True])
def test_a_file_reference_resolves_absolute_or_from_the_current_directory(
    tmp_path, monkeypatch, relative):
  path = _write(tmp_path / "sub" / "my_rewards.py", """
      def vowels(prompts, completions, answers):
        '''Vowels.'''
        return [float(sum(ch in "aeiou" for ch in c)) for c in completions]
      """)
  if relative:
    monkeypatch.chdir(tmp_path)
    name = "sub/my_rewards.py:vowels"
  else:
    name = f"{path}:vowels"
  fn = rewards.get(name)
  assert _scored(fn, ["banana", "xyz"]) == [3.0, 0.0]
  config = grpo_config.get_config("tiny")
  config.rewards.functions, config.rewards.weights = ("accuracy", name), (1., 1.)
  train_lib.validate(config)
  # --dry_run lists it among the components, with its docstring.
  picked = dict(catalog.chosen(config))  # the last line of each field
  assert picked["rewards.functions"] == catalog.Line(name, "", "Vowels.")


@pytest.mark.parametrize("name, problem", [
    ("no_such_reward", r"'no_such_reward' is unknown; choose from .*accuracy"
     r".*module\.path:function"),
    ("ref_missing_pkg.mod:fn", r"the module of 'ref_missing_pkg.mod:fn' "
     r"cannot be imported"),
    ("missing_dir/none.py:fn", r"the file of 'missing_dir/none.py:fn' does "
     r"not exist"),
    ("{dir}/rewards.py:nope", r"its module has no 'nope'; name one of its "
     r"functions \(no_args, ok\)"),
    ("{dir}/rewards.py:no_args", r"cannot be called as fn\(prompts, "
     r"completions, answers\): its signature is \(\)"),
    ("{dir}/rewards.py:LIMIT", r"is not a function \(its type: int\)"),
    ("{dir}/broken.py:fn", r"loading the file of .* raised "
     r"ZeroDivisionError"),
    ("{dir}/rewards.py:", r"is not a reward reference"),
    ("a-b:fn", r"names neither a module"),
])
def test_a_bad_reference_is_a_config_error_before_any_compute(
    tmp_path, name, problem):
  _write(tmp_path / "rewards.py", """
      LIMIT = 3
      def ok(prompts, completions, answers):
        return [1.0] * len(completions)
      def no_args():
        return []
      """)
  _write(tmp_path / "broken.py", "x = 1 / 0\n")
  name = name.format(dir=tmp_path)
  config = grpo_config.get_config("tiny")
  config.rewards.functions, config.rewards.weights = (name,), (1.0,)
  # validate is what train and evaluate run before loading any model.
  with pytest.raises(ValueError, match=r"^config\.rewards\.functions: .*"
                     + problem):
    train_lib.validate(config)


def test_two_entries_that_make_one_reward_column_are_a_config_error(
    tmp_path):
  first = _write(tmp_path / "a" / "scores.py", CONSTANT_REWARD)
  second = _write(tmp_path / "b" / "scores.py", CONSTANT_REWARD)
  mine = _write(tmp_path / "c" / "scores.py", """
      def accuracy(prompts, completions, answers):
        return [1.0] * len(completions)
      """)
  config = grpo_config.get_config("tiny")
  config.rewards.weights = (1.0, 1.0)
  config.rewards.functions = (f"{first}:constant", f"{second}:constant")
  with pytest.raises(ValueError, match=r"^config\.rewards\.functions: .* both "
                     r"make the reward column 'constant'"):
    train_lib.validate(config)
  # Shapers read the column "accuracy" as correctness: not another's.
  config.rewards.functions = ("format", f"{mine}:accuracy")
  with pytest.raises(ValueError, match=r"^config\.rewards\.functions: .* "
                     r"the name of a registered reward"):
    train_lib.validate(config)
  # The registered function itself, by reference, is that reward.
  config.rewards.functions = ("format", "grpo_jax.rewards.verifiers:accuracy")
  train_lib.validate(config)
  assert rewards.column_names(config.rewards.functions) == ("format",
                                                            "accuracy")


def test_a_file_reference_runs_in_the_worker_processes(tmp_path):
  path = _write(tmp_path / "pid_reward.py", """
      import os
      def pid(prompts, completions, answers):
        return [float(os.getpid())] * len(completions)
      """)
  name = f"{path}:pid"
  result = rewards.score({name: (rewards.get(name), 1.0)}, ["p"] * 3,
                         ["a", "b", "c"], ["1"] * 3, workers=2)
  assert result.num_errors == {name: 0}, result.first_error
  pids = set(result.per_function[:, 0].astype(int).tolist())
  assert os.getpid() not in pids and pids  # scored elsewhere, by the file


def test_a_referenced_function_registered_in_its_module_brings_its_range(
    tmp_path):
  registered = _write(tmp_path / "registered.py", """
      from grpo_jax.rewards import VERIFIERS
      @VERIFIERS.register("ref_test_half", range=(0.0, 0.5))
      def half(prompts, completions, answers):
        return [0.5] * len(completions)
      """)
  plain = _write(tmp_path / "plain.py", CONSTANT_REWARD)
  with rewards.VERIFIERS.scoped():
    assert rewards.column_ranges(
        ("format", f"{registered}:half", f"{plain}:constant")) == (
            (0.0, 1.0), (0.0, 0.5), None)


_PROBE = """
from grpo_jax.rewards import workers
top_level = workers.unguarded_main_line()
def probe():
  return workers.unguarded_main_line()
in_function = probe()
if __name__ == "__main__":
  guarded = workers.unguarded_main_line()
  guarded_call = probe()
if "__main__" == __name__:
  reversed_guard = workers.unguarded_main_line()
"""


def test_the_unguarded_lines_of_a_main_script_are_found(tmp_path,
                                                        monkeypatch):
  path = _write(tmp_path / "driver.py", _PROBE)
  main = types.ModuleType("__main__")
  main.__file__ = str(path)
  monkeypatch.setitem(sys.modules, "__main__", main)
  exec(compile(path.read_text(), str(path), "exec"), vars(main))  # pylint: disable=exec-used
  lines = path.read_text().splitlines()
  line_of = lambda text: 1 + next(i for i, l in enumerate(lines) if text in l)
  assert main.top_level == (str(path), line_of("top_level ="))
  assert main.in_function == (str(path), line_of("in_function ="))
  assert main.guarded is None and main.guarded_call is None
  assert main.reversed_guard is None
  # pytest's own entry point guards its work: the test process is fine.
  monkeypatch.undo()
  assert workers.unguarded_main_line() is None


def _run(args, *, cwd, timeout=600):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
             JAX_DISABLE_MOST_OPTIMIZATIONS="true")  # tiny programs
  return subprocess.run([sys.executable, *args], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=timeout)


def test_a_referenced_reward_trains_from_the_command_line_and_evaluates(
    tmp_path):
  _write(tmp_path / "my_rewards.py", CONSTANT_REWARD)
  workdir = tmp_path / "run"
  # From the file's directory, by a relative path, as a user would type it.
  trained = _run(["-m", "experiments.train",
                  f"--config={ROOT}/configs/grpo.py:tiny",
                  f"--workdir={workdir}", "--config.train.num_steps=1",
                  "--config.rewards.functions=my_rewards.py:constant",
                  "--config.rewards.weights=1.0"], cwd=tmp_path)
  assert trained.returncode == 0, trained.stderr[-4000:]
  (record,) = metrics.read(str(workdir / metrics.METRICS_FILE))
  # A reference's column is its function's name.
  testing.assert_close(np.float32(record["reward/constant"]),
                       np.float32(CONSTANT))
  testing.assert_close(np.float32(record["reward/total"]),
                       np.float32(CONSTANT))
  assert record["reward_errors/constant"] == 0.0

  out = tmp_path / "eval.json"
  evaluated = _run(["-m", "experiments.evaluate", f"--checkpoint={workdir}",
                    "--k=1", f"--json={out}"], cwd=tmp_path)
  assert evaluated.returncode == 0, evaluated.stderr[-4000:]
  figures = json.loads(out.read_text())
  assert figures["step"] == 1 and 0.0 <= figures["greedy_accuracy"] <= 1.0


_DRIVER = f"""
from configs import grpo
from grpo_jax import train
from grpo_jax.rewards import VERIFIERS

@VERIFIERS.register(range=(0.0, 1.0))
def driver_constant(prompts, completions, answers):
  return [{CONSTANT}] * len(completions)

def main(workdir):
  config = grpo.get_config("tiny")
  config.train.num_steps = 1
  config.rewards.functions = ("accuracy", "driver_constant")
  config.rewards.weights = (1.0, 1.0)
  train.train(config, workdir)
"""


def test_a_driver_without_a_main_guard_stops_before_any_model_loads(
    tmp_path):
  driver = _write(tmp_path / "driver.py", _DRIVER + "\nmain('run')\n")
  result = _run([str(driver)], cwd=tmp_path, timeout=300)
  assert result.returncode != 0
  assert "UnguardedScript" in result.stderr, result.stderr[-4000:]
  assert 'if __name__ == "__main__":' in result.stderr
  assert f"{driver}, line {len(driver.read_text().splitlines())}" \
      in result.stderr
  assert not (tmp_path / "run" / metrics.METRICS_FILE).exists()


def test_a_driver_with_a_main_guard_trains_with_its_reward(tmp_path):
  driver = _write(tmp_path / "driver.py", _DRIVER
                  + "\nif __name__ == '__main__':\n  main('run')\n")
  result = _run([str(driver)], cwd=tmp_path)
  assert result.returncode == 0, result.stderr[-4000:]
  (record,) = metrics.read(str(tmp_path / "run" / metrics.METRICS_FILE))
  testing.assert_close(np.float32(record["reward/driver_constant"]),
                       np.float32(CONSTANT))
  assert record["reward_errors/driver_constant"] == 0.0
