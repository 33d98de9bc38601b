"""The kernel under test: the installed package (kernel-builder's convention), else this built repository."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def kernel():
    try:
        import quantized_linear  # kernel-builder's development shell installs the package

        return quantized_linear
    except ImportError:
        pass
    repo = Path(__file__).resolve().parents[1]
    if not any((repo / "build").glob("*/metadata.json")):
        pytest.skip(f"{repo} is not built; run `kernel-explorer build {repo}` and test the built copy")
    from kernels import get_local_kernel

    return get_local_kernel(repo)
