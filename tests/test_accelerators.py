"""runtime.accelerators: the machine's accelerator and the jax wheels it
lacks, found without importing jax (the notebooks' runtime cell)."""

import importlib
import importlib.metadata
import subprocess
import sys

import pytest

from grpo_jax.runtime import accelerators

# jax 0.10.2's own requirement lines, in the form `importlib.metadata` gives
# them (written out here, not read from the installed jax).
JAX_REQUIRES = (
    "jaxlib<=0.10.2,>=0.10.1",
    "numpy>=2.0",
    'jaxlib<=0.10.2,>=0.10.2; extra == "tpu"',
    'libtpu==0.0.42.*; extra == "tpu"',
    'requests; extra == "tpu"',
    'jaxlib<=0.10.2,>=0.10.2; extra == "cuda12"',
    'jax-cuda12-plugin[with-cuda]<=0.10.2,>=0.10.2; extra == "cuda12"',
    'jaxlib<=0.10.2,>=0.10.2; extra == "cuda13"',
    'jax-cuda13-plugin[with-cuda]<=0.10.2,>=0.10.2; extra == "cuda13"',
    'kubernetes; extra == "k8s"',
)
CPU_ONLY = {"jax": "0.10.2", "jaxlib": "0.10.2", "numpy": "2.4.6",
            "requests": "2.32.0"}


def test_a_tpu_chip_on_the_pci_bus_is_a_tpu():
  v5e = ("0x1ae0", "0x0063")
  assert accelerators.accelerator([("0x8086", "0x1237"), v5e], []) == "tpu"


def test_googles_network_card_alone_is_no_tpu():
  # Every Google Cloud VM (Colab's CPU runtime too) has Google's gVNIC.
  gvnic = ("0x1ae0", "0x0042")
  assert accelerators.accelerator([gvnic], []) == "cpu"


def test_an_nvidia_device_file_is_a_gpu_and_nothing_is_a_cpu():
  assert accelerators.accelerator([], ["/dev/nvidia0"]) == "gpu"
  assert accelerators.accelerator([], []) == "cpu"


def test_pci_ids_are_read_per_device_lowercased_skipping_incomplete_ones(
    tmp_path):
  for folder, ids in (("0000:00:04.0", ("0x1AE0\n", "0x0063\n")),
                      ("0000:00:05.0", ("0x10de\n", None))):
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "vendor").write_text(ids[0])
    if ids[1] is not None:
      (tmp_path / folder / "device").write_text(ids[1])
  assert accelerators.read_pci_devices(str(tmp_path)) == [("0x1ae0", "0x0063")]
  assert accelerators.read_pci_devices(str(tmp_path / "absent")) == []


def test_a_cpu_needs_nothing():
  assert accelerators.missing_requirement("cpu", JAX_REQUIRES, CPU_ONLY) is None


def test_a_tpu_without_libtpu_gets_jax_tpu_at_the_installed_version():
  assert (accelerators.missing_requirement("tpu", JAX_REQUIRES, CPU_ONLY)
          == "jax[tpu]==0.10.2")


@pytest.mark.parametrize("libtpu, needed", [
    ("0.0.42", None),
    ("0.0.42.post1", None),
    # Colab's libtpu for its own older jax: the wrong runtime for 0.10.2.
    ("0.0.17", "jax[tpu]==0.10.2"),
])
def test_libtpu_must_be_the_version_the_installed_jax_names(libtpu, needed):
  installed = dict(CPU_ONLY, libtpu=libtpu)
  assert accelerators.missing_requirement("tpu", JAX_REQUIRES,
                                          installed) == needed


@pytest.mark.parametrize("plugins, needed", [
    ({"jax-cuda12-plugin": "0.10.2"}, None),
    ({"jax-cuda13-plugin": "0.10.2"}, None),
    ({}, "jax[cuda12]==0.10.2"),
    ({"jax-cuda12-plugin": "0.9.0"}, "jax[cuda12]==0.10.2"),
    # A plugin of the right version beside an older jaxlib is incomplete.
    ({"jax-cuda12-plugin": "0.10.2", "jaxlib": "0.10.1"},
     "jax[cuda12]==0.10.2"),
])
def test_a_gpu_needs_a_cuda_plugin_at_jaxs_version(plugins, needed):
  installed = dict(CPU_ONLY, **plugins)
  assert accelerators.missing_requirement("gpu", JAX_REQUIRES,
                                          installed) == needed


def test_distribution_names_compare_as_pip_compares_them():
  assert accelerators.canonical("Jax_CUDA12.Plugin") == "jax-cuda12-plugin"
  installed = dict(CPU_ONLY, jax_cuda12_plugin="0.10.2")
  installed = {accelerators.canonical(k): v for k, v in installed.items()}
  assert accelerators.missing_requirement("gpu", JAX_REQUIRES,
                                          installed) is None


def test_this_environments_jax_on_a_tpu_would_need_libtpu():
  # The installed jax's real metadata: a CPU environment has no libtpu.
  installed = accelerators.installed_distributions()
  if "libtpu" in installed:
    pytest.skip("libtpu is installed here")
  version = importlib.metadata.version("jax")
  assert accelerators.missing_requirement(
      "tpu", importlib.metadata.requires("jax"), installed) == (
          f"jax[tpu]=={version}")


def test_prepare_on_a_cpu_installs_nothing(monkeypatch):
  monkeypatch.setattr(accelerators, "this_machine", lambda: "cpu")
  monkeypatch.setattr(subprocess, "run", pytest.fail)
  assert accelerators.prepare() == "cpu"


def test_prepare_installs_the_missing_wheels_before_jax_is_imported(
    monkeypatch):
  calls = []
  monkeypatch.setattr(accelerators, "this_machine", lambda: "tpu")
  monkeypatch.setattr(accelerators, "missing_requirement",
                      lambda name, requires, installed: "jax[tpu]==0.10.2")
  monkeypatch.setattr(subprocess, "run",
                      lambda args, check: calls.append((args, check)))
  monkeypatch.delitem(sys.modules, "jax")  # restored after the test
  assert accelerators.prepare() == "tpu"
  assert calls == [([sys.executable, "-m", "pip", "install", "-q",
                     "jax[tpu]==0.10.2"], True)]


def test_prepare_after_jax_was_imported_asks_for_a_restart(monkeypatch):
  importlib.import_module("jax")  # as in a kernel that already ran jax
  monkeypatch.setattr(accelerators, "this_machine", lambda: "gpu")
  monkeypatch.setattr(accelerators, "missing_requirement",
                      lambda name, requires, installed: "jax[cuda12]==0.10.2")
  monkeypatch.setattr(subprocess, "run", pytest.fail)
  with pytest.raises(RuntimeError, match="restart the runtime"):
    accelerators.prepare()


def test_finding_the_machine_and_its_wheels_imports_no_jax():
  # The runtime cell runs before jax's first import; so must all of this.
  program = (
      "import importlib.metadata, sys\n"
      "from grpo_jax.runtime import accelerators as a\n"
      "print(a.this_machine())\n"
      "a.missing_requirement('tpu', importlib.metadata.requires('jax'),"
      " a.installed_distributions())\n"
      "print('jax' in sys.modules)\n")
  result = subprocess.run([sys.executable, "-c", program], check=True,
                          capture_output=True, text=True)
  machine, jax_imported = result.stdout.split()
  assert machine in ("cpu", "gpu", "tpu")
  assert jax_imported == "False"
