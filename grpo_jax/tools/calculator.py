"""The ``calculator`` tool: an arithmetic expression's value, by a parser of
its own, never `eval`.

Python's `ast` parses the expression; the evaluator walks it and accepts only
numbers (int and float literals), ``+ - * / // %  **``, unary ``-`` and
``+``, and parentheses (which the tree holds as nesting). Anything else (a
name, a call, an attribute, ``^``, a string) is an error observation saying
what was found. Results follow Python's arithmetic (``7 / 2`` is ``3.5``,
``6 / 3`` is ``2.0``, ``7 // 2`` is ``3``) and print as Python prints them.

Sizes are bounded before they are computed: an integer product or power
whose result would have more than `max_digits` digits, an exponent beyond
`max_exponent`, and an expression longer than `max_length` characters are
errors, as are division by zero, a float overflow and a complex result.
"""

import ast
import math
import operator

from grpo_jax import registry
from grpo_jax.tools.base import TOOLS, error

ALLOWED = "numbers, + - * / // % **, unary minus and parentheses"
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub,
           ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_SYMBOL = {ast.BitXor: "^", ast.BitAnd: "&", ast.BitOr: "|",
           ast.LShift: "<<", ast.RShift: ">>", ast.MatMult: "@",
           ast.Invert: "~", ast.Not: "not"}

_NODE = {ast.Call: "a function call", ast.Attribute: "an attribute",
         ast.Subscript: "an index", ast.Compare: "a comparison",
         ast.BoolOp: "and/or", ast.Lambda: "a lambda",
         ast.List: "a list", ast.Dict: "a dict", ast.Set: "a set",
         ast.IfExp: "an if expression", ast.JoinedStr: "a string"}


class CalculatorError(ValueError):
  """An expression the calculator refuses; the message says why."""


def _check(kind: str, value, limit: str) -> None:
  if isinstance(value, complex):
    raise CalculatorError(f"the {kind} is not a real number")
  if isinstance(value, float) and not math.isfinite(value):
    raise CalculatorError(f"the {kind} is too large ({limit})")


def _log10_abs(value) -> float:
  return math.log10(abs(value)) if value else 0.0


def _bounded(op, left, right, max_digits: int, max_exponent: int):
  """``op(left, right)``, an integer result within `max_digits` digits and
  an exponent within `max_exponent`; a product or power clearly beyond
  them (by logarithms) is refused before it is computed."""
  limit = f"more than {max_digits} digits"
  if op is ast.Pow:
    if abs(right) > max_exponent:
      raise CalculatorError(
          f"the exponent {right} is beyond the limit {max_exponent}")
    if isinstance(left, int) and isinstance(right, int) and right > 0 \
        and _log10_abs(left) * right >= max_digits + 1:
      raise CalculatorError(f"the result would have {limit}")
  if op is ast.Mult and isinstance(left, int) and isinstance(right, int) \
      and _log10_abs(left) + _log10_abs(right) >= max_digits + 1:
    raise CalculatorError(f"the result would have {limit}")
  try:
    value = _BINARY[op](left, right)
  except ZeroDivisionError:
    raise CalculatorError("division by zero") from None
  except OverflowError:
    raise CalculatorError(f"the result is too large ({limit})") from None
  _check("result", value, limit)
  if isinstance(value, int) and abs(value) >= 10**max_digits:
    raise CalculatorError(f"the result has {limit}")
  return value


def _evaluate(node, max_digits: int, max_exponent: int):
  """The value of an expression tree, walking only the allowed nodes."""
  if isinstance(node, ast.Expression):
    return _evaluate(node.body, max_digits, max_exponent)
  if isinstance(node, ast.Constant):
    if isinstance(node.value, bool) or not isinstance(node.value,
                                                      (int, float)):
      raise CalculatorError(f"{node.value!r} is not a number")
    _check("number", node.value, f"more than {max_digits} digits")
    if isinstance(node.value, int) and abs(node.value) >= 10**max_digits:
      raise CalculatorError(f"a number has more than {max_digits} digits")
    return node.value
  if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
    left = _evaluate(node.left, max_digits, max_exponent)
    right = _evaluate(node.right, max_digits, max_exponent)
    return _bounded(type(node.op), left, right, max_digits, max_exponent)
  if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
    return _UNARY[type(node.op)](
        _evaluate(node.operand, max_digits, max_exponent))
  if isinstance(node, (ast.BinOp, ast.UnaryOp)):
    symbol = _SYMBOL.get(type(node.op), type(node.op).__name__)
    hint = " (write ** for a power)" if symbol == "^" else ""
    raise CalculatorError(f"the operator {symbol!r} is not allowed{hint}")
  if isinstance(node, ast.Name):
    raise CalculatorError(f"the name {node.id!r} is not allowed")
  if isinstance(node, ast.Tuple):
    raise CalculatorError("a comma is not allowed (write 1234, not 1,234)")
  what = _NODE.get(type(node), f"a {type(node).__name__} expression")
  raise CalculatorError(f"{what} is not allowed")


def evaluate(expression: str, *, max_digits: int = 300,
             max_exponent: int = 10_000, max_length: int = 1000):
  """The value of `expression`; a `CalculatorError` saying what is wrong
  with it."""
  if not isinstance(expression, str):
    raise CalculatorError("the expression must be text")
  if len(expression) > max_length:
    raise CalculatorError(f"the expression is longer than {max_length} "
                          "characters")
  if not expression.strip():
    raise CalculatorError("the expression is empty")
  try:
    tree = ast.parse(expression.strip(), mode="eval")
  except SyntaxError as e:
    raise CalculatorError(f"cannot parse it ({e.msg})") from None
  except (RecursionError, MemoryError):
    raise CalculatorError("cannot parse it (nested too deeply)") from None
  except ValueError as e:  # a null byte
    raise CalculatorError(f"cannot parse it ({e})") from None
  try:
    return _evaluate(tree, max_digits, max_exponent)
  except RecursionError:
    raise CalculatorError("it is nested too deeply") from None


def _check_options(max_digits=300, max_exponent=10_000, max_length=1000):
  registry.check_int("max_digits", max_digits, low=1)
  registry.check_int("max_exponent", max_exponent, low=1)
  registry.check_int("max_length", max_length, low=1)


@TOOLS.register(
    "calculator",
    description="Evaluates an arithmetic expression: numbers, + - * / // % "
    "** and parentheses (e.g. 1234 * (56 + 7) / 8). Returns its value.",
    parameters={"type": "object", "properties": {"expression": {
        "type": "string", "description": "the arithmetic expression"}},
                "required": ["expression"], "additionalProperties": False},
    check=_check_options,
    examples=({}, {"max_digits": 20}))
def calculator(arguments, *, max_digits: int = 300, max_exponent: int = 10_000,
               max_length: int = 1000) -> str:
  """The value of ``arguments["expression"]`` as text, or an error
  observation saying what is wrong with the expression."""
  try:
    value = evaluate(arguments.get("expression"), max_digits=max_digits,
                     max_exponent=max_exponent, max_length=max_length)
  except CalculatorError as e:
    return error(f"calculator: {e}; it takes {ALLOWED}")
  return repr(value)
