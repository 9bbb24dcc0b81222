"""The machine's accelerator, and the jax wheels it needs, found before jax
is imported (the notebooks' runtime cell on Colab).

Installing grpo_jax on a fresh Colab runtime may replace the runtime's own
jax with the version setup.py pins, a CPU-only wheel: a TPU then needs
libtpu, and a GPU jax's CUDA plugin, at that jax's version, and they must
be installed before jax's first import in the process. Nothing here
imports jax, so a notebook can call `prepare` first.
"""

import glob
import importlib.metadata
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping

GOOGLE_PCI_VENDOR = "0x1ae0"
# Google's PCI device ids that are TPU chips: v2/v3, v4, v5p, v5e, v6e and
# TPU7x. Google's vendor id alone also covers the network card and disks of
# any Google Cloud VM, Colab's CPU runtimes included.
TPU_PCI_DEVICES = frozenset(
    {"0x0027", "0x005e", "0x0062", "0x0063", "0x006f", "0x0076"})
NVIDIA_DEVICE_FILES = ("/dev/nvidia0", "/dev/nvidiactl")
# jax's pip extras per accelerator; the first is installed when none is
# complete. cuda12 first: jax's CUDA 13 wheels need a newer driver than
# Colab's GPU runtimes have had.
JAX_EXTRAS = {"tpu": ("tpu",), "gpu": ("cuda12", "cuda13")}


def accelerator(pci_devices: Iterable[tuple[str, str]],
                nvidia_device_files: Iterable[str]) -> str:
  """'tpu', 'gpu' or 'cpu', from the machine's PCI (vendor, device) ids and
  the NVIDIA device files present on it."""
  if any(vendor == GOOGLE_PCI_VENDOR and device in TPU_PCI_DEVICES
         for vendor, device in pci_devices):
    return "tpu"
  if any(True for _ in nvidia_device_files):
    return "gpu"
  return "cpu"


def read_pci_devices(root: str = "/sys/bus/pci/devices"
                     ) -> list[tuple[str, str]]:
  """The (vendor, device) ids of the PCI devices under `root`, e.g.
  ("0x1ae0", "0x0063") for a TPU v5e chip; [] where there is no such
  folder (a container, macOS)."""
  found = []
  for folder in sorted(glob.glob(os.path.join(root, "*"))):
    try:
      ids = []
      for name in ("vendor", "device"):
        with open(os.path.join(folder, name)) as f:
          ids.append(f.read().strip().lower())
    except OSError:
      continue
    found.append(tuple(ids))
  return found


def this_machine() -> str:
  """This machine's accelerator: 'tpu', 'gpu' or 'cpu'."""
  return accelerator(read_pci_devices(),
                     [f for f in NVIDIA_DEVICE_FILES if os.path.exists(f)])


def canonical(name: str) -> str:
  """A distribution's name as pip compares it (PEP 503)."""
  return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions() -> dict[str, str]:
  """Canonical distribution name -> installed version."""
  return {canonical(d.metadata["Name"]): d.version
          for d in importlib.metadata.distributions() if d.metadata["Name"]}


def missing_requirement(name: str, jax_requires: Iterable[str],
                        installed: Mapping[str, str]) -> str | None:
  """The pip requirement that gives the installed jax its wheels for the
  accelerator `name` ('tpu', 'gpu', 'cpu'), or None when none is missing.

  jax_requires: jax's own requirement lines
  (`importlib.metadata.requires("jax")`), whose `extra == "tpu"` lines name
  what a TPU needs (jaxlib, libtpu) at this jax's version; installed:
  canonical distribution name -> version. An extra is complete when every
  one of its lines is installed at a version the line allows.
  """
  from packaging import requirements  # pylint: disable=g-import-not-at-top
  extras = JAX_EXTRAS.get(name, ())
  lines = [requirements.Requirement(line) for line in jax_requires]

  def complete(extra):
    needed = [r for r in lines if r.marker is not None
              and "extra" in str(r.marker)
              and r.marker.evaluate({"extra": extra})]
    return bool(needed) and all(
        canonical(r.name) in installed
        and r.specifier.contains(installed[canonical(r.name)],
                                 prereleases=True)
        for r in needed)

  if not extras or any(complete(extra) for extra in extras):
    return None
  return f"jax[{extras[0]}]=={installed['jax']}"


def on_colab() -> bool:
  return "google.colab" in sys.modules


def prepare() -> str:
  """Finds this machine's accelerator and installs the jax wheels it lacks
  (nothing on a CPU, nothing when jax already has them); returns 'tpu',
  'gpu' or 'cpu'. Call it before the first `import jax`."""
  name = this_machine()
  requirement = missing_requirement(
      name, importlib.metadata.requires("jax") or (),
      installed_distributions())
  if requirement:
    if "jax" in sys.modules:
      raise RuntimeError(
          f"this {name} needs {requirement}, but jax is already imported: "
          "restart the runtime (Colab: Runtime > Restart session) and run "
          "the notebook from the top, so this installs it first.")
    print(f"installing {requirement} for this {name}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    requirement], check=True)
  if name == "cpu" and on_colab():
    print("No GPU or TPU attached: Runtime > Change runtime type picks one.")
  return name
