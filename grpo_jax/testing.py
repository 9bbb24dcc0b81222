"""Helpers shared by the tests: chex asserts and small fixtures.

Tests import chex through this module so that tolerances and conventions live
in one place.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np

# float32 tolerances used across the suite unless a test says otherwise.
RTOL = 1e-5
ATOL = 1e-6


def assert_close(actual, expected, *, rtol=RTOL, atol=ATOL):
  """Trees of arrays are equal within tolerance (chex)."""
  chex.assert_trees_all_close(actual, expected, rtol=rtol, atol=atol)


def assert_finite(tree):
  """Every leaf of `tree` is free of NaN and inf."""
  chex.assert_tree_all_finite(tree)


def assert_shape(x, shape):
  chex.assert_shape(x, shape)


def random_logps(key, shape, *, scale=1.0):
  """Plausible log-probs (negative) of the given shape."""
  return -jnp.abs(jax.random.normal(key, shape)) * scale


def random_mask(key, shape, *, min_length=1):
  """A right-padded [N, T] mask with lengths in [min_length, T]."""
  n, t = shape
  lengths = jax.random.randint(key, (n,), min_length, t + 1)
  return (jnp.arange(t)[None, :] < lengths[:, None]).astype(jnp.float32)


def numpy(x):
  return np.asarray(jax.device_get(x))


# A character-level chat tokenizer, built offline: every printable ASCII
# character is one token. Used by the `tiny` model option of the configs.
TINY_SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}")


def tiny_tokenizer():
  """A transformers tokenizer over single characters (100 ids, pad 0, eos 1)."""
  import string  # pylint: disable=g-import-not-at-top
  import tokenizers  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  chars = sorted(set(string.printable) - set("\x0b\x0c\r"))
  vocab = {t: i for i, t in enumerate(list(TINY_SPECIAL_TOKENS) + chars)}
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(
      tokenizers.Regex(r"[\s\S]"), behavior="isolated")
  tok.decoder = tokenizers.decoders.Fuse()
  tokenizer = transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
      unk_token="<unk>")
  tokenizer.chat_template = TINY_CHAT_TEMPLATE
  return tokenizer
