"""Packs the kvtier wheel (scripts/build-wheel runs it in a staging directory).

The staging directory holds the package as CMake built it: kvtier/*.py, the extension module
kvtier/_kvtier.<ext>, and the CLI at kvtier/bin/kvtier. Nothing is compiled here. The wheel
is tagged for the Python the module was built for (KVTIER_WHEEL_TAG), which need not be the
Python that runs this script.
"""

import os

from setuptools import setup
from setuptools.dist import Distribution
from wheel.bdist_wheel import bdist_wheel


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


class TaggedWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        python, abi, platform = os.environ["KVTIER_WHEEL_TAG"].split("-")
        return python, abi, platform


requires = os.environ.get("KVTIER_DEBIAN_REQUIRES", "")
setup(
    name="kvtier",
    version=os.environ["KVTIER_VERSION"],
    description="A storage tier for LLM KV-cache pages (SGLang HiCache backend included)",
    long_description=(
        "kvtier stores LLM KV-cache pages in local directories, S3 object stores or memory "
        "and returns them byte-exact and verified, or as a miss. The package holds the "
        "extension module, kvtier.sglang (an SGLang HiCache storage backend) and the "
        "`kvtier` CLI.\n\n"
        "The module and the CLI link these shared libraries of the system, from the Debian "
        f"packages: {requires}. Install them first (apt-get install {requires}).\n"
    ),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=os.environ.get("KVTIER_PYTHON_REQUIRES", ">=3.8"),
    packages=["kvtier"],
    package_data={"kvtier": ["_kvtier*.so", "bin/kvtier"]},
    entry_points={"console_scripts": ["kvtier=kvtier._cli:main"]},
    distclass=BinaryDistribution,
    cmdclass={"bdist_wheel": TaggedWheel},
    zip_safe=False,
)
