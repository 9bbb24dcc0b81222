"""Tests for the tools (grpo_jax.tools): the registry and `make` (by name and
by reference), `call`'s error observations, the calculator against
hand-computed values and its refusals, and the Python sandbox's output,
time, memory and output limits and its isolation (network, writes outside
its directory), each isolation test run where that isolation works here and
skipped with the reason where it does not.
"""

import builtins
import os
import socket
import textwrap
import time
import uuid

import pytest

from grpo_jax import tools
from grpo_jax.config.errors import ConfigError
from grpo_jax.tools import sandbox

NET_ISOLATED = ("bwrap", "unshare")  # isolations with a network of their own


def _calculate(expression, **options):
  return tools.make("calculator", **options)({"expression": expression})


# --- the calculator ---------------------------------------------------------

@pytest.mark.parametrize("expression, expected", [
    ("12 * (3 + 4)", "84"),
    ("2**10 - 24", "1000"),
    ("1234 * 5678", "7006652"),
    ("7 / 2", "3.5"),
    ("6 / 3", "2.0"),       # true division is a float, as in Python
    ("-7 // 2", "-4"),      # floor division rounds down
    ("17 % 5", "2"),
    ("-(2 + 3)**2", "-25"),  # ** binds tighter than unary minus
    ("-2**2", "-4"),
    ("2**-2", "0.25"),
    ("1.5 * 4", "6.0"),
    ("((1))", "1"),
    ("  +3 - -3 ", "6"),
])
def test_the_calculator_gives_hand_computed_values(expression, expected):
  assert _calculate(expression) == expected


def test_the_calculator_never_calls_eval(monkeypatch):
  def no_eval(*args, **kwargs):
    raise AssertionError("eval was called")
  monkeypatch.setattr(builtins, "eval", no_eval)
  assert _calculate("3 * (4 + 5)") == "27"


@pytest.mark.parametrize("expression, says", [
    ("__import__('os')", "function call"),
    ("__import__('os').system('true')", "not allowed"),
    ("().__class__", "not allowed"),
    ("x + 1", "name 'x'"),
    ("'a' * 3", "not a number"),
    ("2 ^ 3", "write ** for a power"),
    ("1,234", "comma"),
    ("1 < 2", "comparison"),
    ("True + 1", "not a number"),
    ("5 / 0", "division by zero"),
    ("5 // 0", "division by zero"),
    ("5 % 0", "division by zero"),
    ("0 ** -1", "division by zero"),
    ("1 +", "cannot parse"),
    ("", "empty"),
    ("9**9**9", "exponent"),
    ("1e300 * 1e300", "too large"),
    ("1e400", "too large"),
    ("(-8) ** 0.5", "not a real number"),
    ("(" * 300 + "1" + ")" * 300, "cannot parse"),
    ("1" * 1001, "longer than 1000 characters"),
])
def test_the_calculator_refuses_with_an_observation(expression, says):
  observation = _calculate(expression)
  assert tools.is_error(observation), observation
  assert says in observation


def test_the_calculator_bounds_the_digits_of_a_result():
  assert _calculate("99 * 10", max_digits=3) == "990"
  assert _calculate("999", max_digits=3) == "999"
  for too_long in ("100 * 10", "1000", "10**3", "999 + 1"):
    observation = _calculate(too_long, max_digits=3)
    assert tools.is_error(observation) and "3 digits" in observation
  # Refused by size before the product is computed: this returns at once.
  start = time.monotonic()
  assert tools.is_error(_calculate("7**9999 * 7**9999 * 7**9999"))
  assert time.monotonic() - start < 1.0
  assert _calculate("-" * 900 + "1", max_length=10_000) == "1"
  deep = _calculate("-" * 5000 + "1", max_length=10_000)
  assert tools.is_error(deep) and "nested too deeply" in deep


# --- the registry, make and call --------------------------------------------

def test_registered_tools_give_a_chat_template_schema():
  assert {"calculator", "python"} <= set(tools.names())
  spec = tools.schema(tools.make("calculator"))
  assert spec["type"] == "function"
  assert spec["function"]["name"] == "calculator"
  assert spec["function"]["parameters"]["required"] == ["expression"]
  assert spec["function"]["description"]
  python_spec = tools.schema(tools.make("python"))["function"]
  assert list(python_spec["parameters"]["properties"]) == ["code"]


@pytest.mark.parametrize("name, options, field", [
    ("abacus", {}, "config.tools: 'abacus' is unknown"),
    ("calculator", {"digits": 3}, "config.tools: tool 'calculator' takes no "
     "option 'digits'"),
    ("calculator", {"max_digits": 0}, "config.tools.max_digits:"),
    ("python", {"time_limit_s": -1.0}, "config.tools.time_limit_s:"),
    ("python", {"isolation": "docker"}, "config.tools.isolation:"),
    ("python", {"memory_mb": 8}, "config.tools.memory_mb:"),
])
def test_make_fails_on_a_bad_name_option_or_value(name, options, field):
  with pytest.raises(ConfigError) as raised:
    tools.make(name, **options)
  assert str(raised.value).startswith(field), raised.value


@pytest.mark.parametrize("arguments, says", [
    ({}, "missing required argument 'expression'"),
    ({"expression": 3}, "must be of type string"),
    ({"expression": "1", "extra": 2}, "unknown argument 'extra'"),
    ("1 + 1", "must be a JSON object"),
    (None, "must be a JSON object"),
])
def test_bad_arguments_are_an_observation(arguments, says):
  observation = tools.make("calculator")(arguments)
  assert tools.is_error(observation) and says in observation, observation


USER_TOOLS = '''
def shout(arguments, *, suffix="!"):
  """Repeats the text in capitals.

  More words the model need not read."""
  return arguments["text"].upper() + suffix

shout.parameters = {"type": "object", "properties": {"text": {
    "type": "string"}}, "required": ["text"]}

def broken(arguments):
  raise RuntimeError("the lookup table is missing")

def numeric(arguments):
  return 42

def no_arguments():
  return "x"
'''


def test_a_users_tool_by_file_reference(tmp_path):
  path = tmp_path / "user_tools.py"
  path.write_text(textwrap.dedent(USER_TOOLS))
  shout = tools.make(f"{path}:shout")
  assert shout.name == "shout"
  assert shout.description == "Repeats the text in capitals."
  assert shout.parameters["required"] == ["text"]
  assert shout({"text": "hi"}) == "HI!"
  assert tools.make(f"{path}:shout", suffix="?")({"text": "hi"}) == "HI?"
  assert "missing required argument 'text'" in shout({})
  broken = tools.make(f"{path}:broken")({"q": 1})
  assert tools.is_error(broken) and "the lookup table is missing" in broken
  assert "returned int, not text" in tools.make(f"{path}:numeric")({})
  with pytest.raises(ConfigError, match="cannot be called as fn"):
    tools.make(f"{path}:no_arguments")
  with pytest.raises(ConfigError, match="cannot be called as fn"):
    tools.make(f"{path}:shout", volume=11)
  with pytest.raises(ConfigError, match="has no 'whisper'"):
    tools.make(f"{path}:whisper")
  with pytest.raises(ConfigError, match="not a tool reference"):
    tools.make(f"{path}:")


def test_a_users_tool_by_module_reference_brings_its_registration(
    tmp_path, monkeypatch):
  (tmp_path / "user_tools_pkg").mkdir()
  (tmp_path / "user_tools_pkg" / "__init__.py").write_text("")
  (tmp_path / "user_tools_pkg" / "dice.py").write_text(textwrap.dedent('''
      from grpo_jax.tools import TOOLS

      @TOOLS.register(description="Says a die's opposite face.",
                      parameters={"type": "object", "properties": {
                          "face": {"type": "integer"}},
                                  "required": ["face"]})
      def opposite(arguments):
        return str(7 - arguments["face"])
      '''))
  monkeypatch.syspath_prepend(str(tmp_path))
  with tools.TOOLS.scoped():
    tool = tools.make("user_tools_pkg.dice:opposite")
    assert tool.description == "Says a die's opposite face."
    assert tool({"face": 2}) == "5"
    assert "must be of type integer" in tool({"face": "2"})
    assert "must be of type integer" in tool({"face": True})


# --- the Python sandbox -----------------------------------------------------

def _run(code, **options):
  return sandbox.run_python(textwrap.dedent(code), **options)


def test_the_sandbox_returns_stdout_stderr_and_the_exit_status():
  tool = tools.make("python")
  assert tool({"code": "print(6 * 7)"}) == "42"
  assert tool({"code": "pass"}) == "(no output)"
  failed = tool({"code": "import sys\nprint('out')\n"
                         "print('err', file=sys.stderr)\nsys.exit(3)"})
  assert failed == ("error: python: the code exited with status 3\nout\n"
                    "[stderr]\nerr")
  raised = tool({"code": "1 / 0"})
  assert tools.is_error(raised) and "ZeroDivisionError" in raised
  # Tracebacks name the script by a path that is the same in every run.
  assert 'File "./main.py", line 1' in raised


def test_the_sandbox_directory_is_fresh_private_and_removed(tmp_path,
                                                           monkeypatch):
  monkeypatch.setattr(sandbox.tempfile, "tempdir", str(tmp_path))
  monkeypatch.setenv("GRPO_JAX_TEST_SECRET", "1")
  code = """
      import os
      open("left_behind.txt", "w").write("x")
      print(sorted(os.listdir(".")))
      print("GRPO_JAX_TEST_SECRET" in os.environ)
      """
  first = _run(code)
  second = _run(code)
  assert first.stdout == second.stdout == "['left_behind.txt', 'main.py']\n" \
      "False\n"
  assert list(tmp_path.iterdir()) == []


def test_the_time_limit_kills_the_code_and_what_it_started():
  token = uuid.uuid4().hex  # names the child, to look for it afterwards
  start = time.monotonic()
  result = _run(f"""
      import subprocess, sys
      subprocess.Popen([sys.executable, "-c",
                        "import time; time.sleep(60)", "{token}"])
      while True:
        pass
      """, time_limit_s=1.0)
  assert time.monotonic() - start < 1.0 + 3.0
  assert result.timed_out
  assert "time limit of 1 s ran out" in sandbox.observation(result, 1.0)
  time.sleep(0.2)
  alive = [p for p in os.listdir("/proc") if p.isdigit()
           and token in _cmdline(p)]
  assert not alive, f"the sandbox's child outlived it: {alive}"


@pytest.mark.parametrize("isolation", NET_ISOLATED)
def test_a_process_that_leaves_the_group_dies_with_the_sandbox(isolation):
  if not sandbox.works(isolation):
    pytest.skip(f"isolation {isolation!r} does not work on this machine "
                f"({sandbox.describe()}); without a PID namespace a "
                "process that calls setsid outlives the sandbox")
  token = uuid.uuid4().hex
  result = _run(f"""
      import subprocess, sys
      subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                        "{token}"], start_new_session=True)
      print("started", flush=True)
      """, isolation=isolation)
  assert result.stdout == "started\n" and not result.timed_out
  time.sleep(0.2)
  assert not [p for p in os.listdir("/proc") if p.isdigit()
              and token in _cmdline(p)]


def _cmdline(pid):
  try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      return f.read().decode(errors="replace")
  except OSError:
    return ""


def test_the_memory_limit_refuses_a_large_allocation():
  small = _run("x = bytearray(16 << 20)\nprint('ok')", memory_mb=128)
  assert small.stdout == "ok\n" and small.returncode == 0
  large = _run("x = bytearray(512 << 20)\nprint('ok')", memory_mb=128)
  assert large.returncode == 1 and large.stdout == ""
  assert "MemoryError" in large.stderr


def test_output_is_truncated_to_the_limit():
  result = _run("print('x' * 5000)", max_output_chars=100)
  assert result.stdout == "x" * 100
  assert result.dropped == 5001 - 100  # the newline is dropped too
  assert sandbox.observation(result, 10.0).endswith(
      "[output truncated: 4901 more characters]")
  # A flood of output neither blocks the sandbox nor fills memory.
  flood = _run("""
      import sys
      while True:
        sys.stdout.write('y' * 65536)
      """, time_limit_s=1.0, max_output_chars=100)
  assert flood.timed_out and flood.stdout == "y" * 100
  assert flood.dropped > 65536


@pytest.fixture
def listening_port():
  """A port on 127.0.0.1 that accepts connections on the host."""
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen(8)
  yield server.getsockname()[1]
  server.close()


CONNECT = """
    import socket
    try:
      socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
      print("connected")
    except OSError as e:
      print("refused", type(e).__name__)
    """


@pytest.mark.parametrize("isolation", NET_ISOLATED)
def test_the_sandbox_cannot_reach_the_network(isolation, listening_port):
  if not sandbox.works(isolation):
    pytest.skip(f"isolation {isolation!r} does not work on this machine "
                f"({sandbox.describe()})")
  result = _run(CONNECT.format(port=listening_port), isolation=isolation)
  assert result.stdout.startswith("refused"), result


def test_without_isolation_the_network_is_reachable(listening_port):
  # What the module docstring says of "none", and the check that the port
  # the isolation tests use does accept a connection.
  result = _run(CONNECT.format(port=listening_port), isolation="none")
  assert result.stdout == "connected\n", result


def test_the_sandbox_cannot_write_outside_its_directory(tmp_path):
  if not sandbox.works("bwrap"):
    pytest.skip("only bubblewrap keeps the file system read-only outside "
                "the sandbox's directory, and it does not work here "
                f"({sandbox.describe()})")
  outside = tmp_path / "outside"
  outside.mkdir()
  outside.chmod(0o777)
  result = _run(f"""
      try:
        open({str(outside / "escaped.txt")!r}, "w").write("x")
        print("written")
      except OSError as e:
        print("refused", e.strerror)
      """, isolation="bwrap")
  assert result.stdout.startswith("refused"), result
  assert list(outside.iterdir()) == []


def test_a_named_isolation_that_does_not_work_is_refused(monkeypatch):
  monkeypatch.setitem(sandbox._AVAILABLE, "bwrap", False)  # pylint: disable=protected-access
  with pytest.raises(ConfigError, match="does not work here"):
    tools.make("python", isolation="bwrap")
