"""The one registry type: every kind of component (objectives, estimators,
KL estimators, aggregations, reward functions, ...) is a `Registry`.

An entry registers where it is defined, with a decorator:

  class ObjectiveMeta(NamedTuple):
    level: str  # "token" or "sequence"
    paper: str = ""

  OBJECTIVES = registry.Registry("objective", meta=ObjectiveMeta)

  @OBJECTIVES.register(level="token", examples=({}, {"clip_high": 0.28}))
  def ppo_clip(logp, old_logp, advantages, mask, *, clip_low=0.2, ...):
    ...

Each kind's metadata is a NamedTuple (``meta=``) defined next to its
registry: a field without a default is a key every entry must declare, the
others take their defaults, and an unknown key is an error when the entry
registers (a typo never silently reads as the default); readers use
attribute access (``entry.meta.level``). A kind without a meta type
declares none (`NoMeta`).

`names()` and `get(name)` (the function) come from here, with one error
message for an unknown name, and `check_options(name, options)` gives one
error for an option the entry does not take. `entry(name)` has the metadata
and the example keyword arguments the contract suites run each entry with.
`scoped()` undoes registrations made inside it (toy entries in tests and
notebooks leave the registry as it was). An entry whose metadata declares
``check(**options)`` has its option values checked by `check_values`: a bad
one is an `OptionError` naming the option; `check_real`, `check_int` and
`check_choice` are the range checks such a ``check`` is made of.
"""

import contextlib
import inspect
import math
import numbers
from typing import (Any, Callable, Dict, Iterator, Mapping, NamedTuple, Tuple,
                    Type)


class OptionError(ValueError):
  """A bad option value; `key` names the option."""

  def __init__(self, key: str, message: str):
    super().__init__(message)
    self.key = key


def check_real(key: str, value, *, low=None, high=None, low_open=False,
               high_open=False, why: str = "") -> None:
  """OptionError unless `value` is a finite real number in the given range
  (NaN is never in range: it would silently turn a term off); `why`, what
  the range means, joins the message."""
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise OptionError(key, f"{key} must be a real number; got {value!r}.")
  if math.isinf(value):
    raise OptionError(key, f"{key} must be finite; got {value!r}.")
  bad = math.isnan(value) or (
      low is not None and (value < low or (low_open and value == low))) or (
          high is not None and (value > high or (high_open and value == high)))
  if bad:
    if low is None and high is None:  # NaN
      raise OptionError(key, f"{key} must be a real number, not NaN; set "
                        "a finite value.")
    if high is None:
      span = f"{'>' if low_open else '>='} {low:g}"
    elif low is None:
      span = f"{'<' if high_open else '<='} {high:g}"
    else:
      span = (f"in {'(' if low_open else '['}{low:g}, "
              f"{high:g}{')' if high_open else ']'}")
    why = f" ({why})" if why else ""
    raise OptionError(key, f"{key} must be {span}{why}; got {value!r}: set "
                      f"a value {span}.")


def check_int(key: str, value, *, low: int, why: str = "") -> None:
  """OptionError unless `value` is an integer (not a bool) >= `low`."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
      or value < low:
    why = f" ({why})" if why else ""
    raise OptionError(key, f"{key} must be an integer >= {low}{why}; got "
                      f"{value!r}: set an integer >= {low}.")


def check_choice(key: str, value, choices) -> None:
  """OptionError unless `value` is one of `choices`."""
  if value not in choices:
    raise OptionError(key, f"{key}={value!r} is unknown; choose one of "
                      f"{', '.join(map(str, choices))}.")


class NoMeta(NamedTuple):
  """The metadata of a kind that declares none: any key is an error."""


class Entry(NamedTuple):
  """One registered component.

  Attributes:
    name: the name a config uses.
    fn: the pure function.
    meta: its kind's metadata NamedTuple (level, paper, state, ...), the
      defaults filled in.
    examples: keyword arguments the contract suites call `fn` with; the
      first is usually ``{}`` (the defaults).
  """
  name: str
  fn: Callable
  meta: Any
  examples: Tuple[Mapping[str, Any], ...]


def typed_meta(kind: str, name: str, meta_type, meta: Mapping[str, Any]):
  """`meta_type(**meta)`, or a ValueError naming the kind, the entry and the
  unknown or missing key."""
  fields = meta_type._fields
  unknown = [key for key in meta if key not in fields]
  if unknown:
    raise ValueError(
        f"{kind} {name!r} registers unknown metadata {unknown[0]!r}; known: "
        f"{', '.join(fields) or '(none)'}.")
  missing = [key for key in fields
             if key not in meta and key not in meta_type._field_defaults]
  if missing:
    raise ValueError(
        f"{kind} {name!r} must declare {', '.join(missing)} when it "
        f"registers (e.g. @register({missing[0]}=...)).")
  return meta_type(**meta)


class Registry:
  """Name -> `Entry` for one kind of component."""

  def __init__(self, kind: str, *, positional: Tuple[str, ...] = (),
               meta: Type[NamedTuple] = NoMeta):
    """`kind` names the component in messages; `positional` lists the array
    arguments every entry takes before its keyword options; `meta` is the
    NamedTuple of its entries' metadata (its fields without a default are
    the keys every entry must declare, checked when it registers)."""
    self.kind = kind
    self.positional = tuple(positional)
    self.meta_type = meta
    self._entries: Dict[str, Entry] = {}

  def register(self, name: str = "", *, examples=({},), **meta):
    """Decorator: registers ``fn`` under `name` (default: its __name__)
    with `meta`, the keyword arguments of the kind's meta type."""
    def decorate(fn):
      key = name or fn.__name__
      if key in self._entries and self._entries[key].fn is not fn:
        raise ValueError(f"{self.kind} {key!r} is registered twice.")
      self._entries[key] = Entry(
          key, fn, typed_meta(self.kind, key, self.meta_type, meta),
          tuple(dict(e) for e in examples))
      return fn
    return decorate

  def names(self) -> Tuple[str, ...]:
    """The registered names, sorted."""
    return tuple(sorted(self._entries))

  def __contains__(self, name) -> bool:
    return name in self._entries

  def entry(self, name: str) -> Entry:
    """The `Entry` of `name`; a ValueError listing the known names if none."""
    if name not in self._entries:
      raise ValueError(
          f"{self.kind} {name!r} is unknown; choose one of "
          f"{', '.join(self.names())}.")
    return self._entries[name]

  def get(self, name: str) -> Callable:
    """The function registered as `name`."""
    return self.entry(name).fn

  def entries(self) -> Iterator[Entry]:
    return (self._entries[n] for n in self.names())

  def options(self, name: str, *, exclude: Tuple[str, ...] = ()
              ) -> Tuple[str, ...]:
    """The keyword options of `name`'s function (not its array arguments)."""
    params = inspect.signature(self.get(name)).parameters
    skip = set(self.positional) | set(exclude)
    return tuple(p for p, v in params.items()
                 if p not in skip and v.kind not in (v.VAR_POSITIONAL,
                                                     v.VAR_KEYWORD))

  def check_options(self, name: str, options: Mapping[str, Any], *,
                    field: str = "", extra: Tuple[str, ...] = (),
                    exclude: Tuple[str, ...] = ()) -> None:
    """ValueError naming the first key of `options` that `name` does not take.

    Args:
      name: the entry.
      options: keyword options from a config.
      field: the config field they came from (for the message).
      extra: more allowed keys (e.g. a stateful entry's state options).
      exclude: keyword arguments the trainer supplies, not the config.
    """
    allowed = self.options(name, exclude=exclude) + tuple(extra)
    for key in options:
      if key not in allowed:
        where = f"{field}.{key}: " if field else ""
        raise ValueError(
            f"{where}{self.kind} {name!r} takes no option {key!r}; use one of "
            f"{', '.join(allowed) or '(none)'}.")

  def check_values(self, name: str, options: Mapping[str, Any], *,
                   field: str = "") -> None:
    """Runs `name`'s metadata ``check(**options)``, if it declares one; an
    `OptionError` it raises is re-raised as ``<field>.<option>: ...``.
    (Only for kinds whose ``check`` takes the options alone: credit rules,
    advantage estimators.)"""
    check = getattr(self.entry(name).meta, "check", None)
    if check is None:
      return
    try:
      check(**options)
    except OptionError as e:
      raise OptionError(e.key, f"{field}.{e.key}: {e}" if field else str(e)
                        ) from None

  @contextlib.contextmanager
  def scoped(self):
    """Registrations made inside the block are removed when it ends."""
    before = dict(self._entries)
    try:
      yield self
    finally:
      self._entries.clear()
      self._entries.update(before)
