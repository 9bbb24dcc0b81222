"""Tools a model calls during an episode: ``fn(arguments: dict) -> str``,
registered in `TOOLS` with a description and a JSON schema of their
arguments (`base`), shown to the model through the chat template's
``tools=`` (`schema`).

| name         | observation                                               |
|--------------|-----------------------------------------------------------|
| `calculator` | an arithmetic expression's value (its own parser, no eval) |
| `python`     | what a program prints in a sandboxed subprocess (`sandbox`: time, memory and output limits, a temporary directory, no network where the OS allows) |

`make(name, **options)` gives a `Tool` with its options bound, for a
registered name or a function of one's own by reference
(``my_pkg.my_tools:lookup``, ``path/to/my_tools.py:lookup``); calling it
(`call`) never raises: a failed call is an observation starting with
``"error: "`` (`is_error`). A new tool is a function under
``@TOOLS.register(description=..., parameters=...)``.
"""

from grpo_jax.tools.base import (ANY_ARGUMENTS, ERROR_PREFIX, TOOLS, Tool,
                                 ToolMeta, argument_problem, call, error,
                                 is_error, make, schema)
from grpo_jax.tools import calculator as _calculator
from grpo_jax.tools import sandbox
from grpo_jax.tools.calculator import CalculatorError, evaluate
from grpo_jax.tools.sandbox import SandboxResult, run_python

calculator = _calculator.calculator
python = sandbox.python
names = TOOLS.names
get = TOOLS.get

__all__ = [
    "ANY_ARGUMENTS", "CalculatorError", "ERROR_PREFIX", "SandboxResult",
    "TOOLS", "Tool", "ToolMeta", "argument_problem", "calculator", "call",
    "error", "evaluate", "get", "is_error", "make", "names", "python",
    "run_python", "sandbox", "schema"]
