"""Models a config names without a checkpoint, and tokenizer ids.

``tiny``: a random 2-layer model over `tiny_tokenizer` (a
character-level tokenizer), built offline in a second, for tests and CI.
Any other name is a checkpoint (`loading.load`).
"""

import jax

from grpo_jax.models import loading
from grpo_jax.models import transformer
from grpo_jax.models.config import ModelConfig


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


def tiny_model_config(vocab_size: int) -> ModelConfig:
  """The `tiny` model: 2 layers, width 32 (a forward pass takes milliseconds)."""
  return ModelConfig(
      model_type="llama", vocab_size=vocab_size, hidden_size=32,
      intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
      head_dim=8, rope_theta=10000.0, tie_word_embeddings=True)


def _tiny_config():
  return tiny_model_config(len(tiny_tokenizer()))


def _tiny_model(seed: int):
  tokenizer = tiny_tokenizer()
  config = tiny_model_config(len(tokenizer))
  return (config, transformer.init_params(config, jax.random.PRNGKey(seed)),
          tokenizer)


# Models built in code, by name: their (config without weights, full build).
_BUILT_IN = {"tiny": (_tiny_config, _tiny_model)}


def built_in_config(name: str):
  """The ModelConfig of a built-in model (no weights), or None when `name`
  names a checkpoint instead."""
  entry = _BUILT_IN.get(name)
  return None if entry is None else entry[0]()


def load_model(name: str, *, seed: int = 0, revision: str = "",
               dtype: str = "float32"):
  """(ModelConfig, params, tokenizer) for a config's ``model.name``: a
  built-in name (``tiny``, initialised from `seed`) or a checkpoint (a hub
  id at `revision`). Params are float32 (the master weights); `dtype` is
  the compute dtype."""
  if name not in _BUILT_IN:
    return loading.load(name, revision=revision, dtype=dtype,
                        param_dtype="float32")
  config, params, tokenizer = _BUILT_IN[name][1](seed)
  return config.replace(dtype=dtype), params, tokenizer


def eos_and_pad(tokenizer):
  """(end ids, pad id) of a tokenizer; the pad id falls back to the first
  end id, then 0."""
  eos_ids = tuple(loading.eos_ids(tokenizer))
  pad_id = tokenizer.pad_token_id
  if pad_id is None:
    pad_id = eos_ids[0] if eos_ids else 0
  return eos_ids, int(pad_id)
