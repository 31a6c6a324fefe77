"""Packaging for tf-vtrace: V-trace (IMPALA) for TensorFlow 2 and Keras."""
import pathlib
import re

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent
# The version is written once, in the package; read as text, because importing
# tf_vtrace would need TensorFlow before it is installed.
VERSION = re.search(r'^__version__ = "([^"]+)"$',
                    (HERE / "tf_vtrace" / "__init__.py").read_text(encoding="utf-8"),
                    re.MULTILINE).group(1)

setup(
    name="tf-vtrace",
    version=VERSION,
    description=(
        "V-trace off-policy correction and the IMPALA loss for TensorFlow 2 / Keras"
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tf_vtrace", "tf_vtrace.*"]),
    python_requires=">=3.10",
    # The ranges tested (constraints.txt pins the exact versions of the test
    # venv). TFP imports tf_keras at import time; its [tf] extra pulls it in,
    # and tf-keras 2.21 itself requires tensorflow 2.21.x. numpy 2.4 is not
    # tested (and breaks TF-Agents 0.19), so a plain `pip install` stays below.
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "tensorflow-probability[tf]>=0.25,<0.26",
        "tf-keras>=2.21,<2.22",
        "numpy>=1.26,<2.4",
    ],
    extras_require={
        "test": ["pytest", "hypothesis", "pytest-xdist", "gymnasium", "ruff"],
        "examples": ["gymnasium>=1.0,<1.5"],
        # What TF-Agents 0.19 really needs beside TF 2.21 (tf_vtrace.tf_agents).
        # tf-agents itself is installed with --no-deps (Makefile, README): its
        # declared pins (tensorflow-probability~=0.23) conflict with TF 2.21.
        # numpy 2.4 breaks its ActorDistributionNetwork; gym 0.23's classic
        # control imports pygame (2.1.3 is the version tested).
        "tf-agents": ["gin-config", "pillow", "tensorboard", "gym==0.23.0",
                      "pygame>=2.1.3", "numpy<2.4"],
        # The IMPALA agent (tf_vtrace.agent): all `make demo` installs.
        "agent": ["gymnasium>=1.0,<1.5", "matplotlib", "tensorboard", "tqdm"],
        # Atari for the agent: ale-py 0.12 bundles the ROMs; gymnasium's
        # AtariPreprocessing resizes with OpenCV.
        "atari": ["gymnasium", "ale-py", "opencv-python-headless"],
        # Continuous-control envs: gymnasium's MuJoCo envs (HalfCheetah-v5,
        # Hopper-v5) run on the `mujoco` wheel and import imageio and
        # packaging; LunarLanderContinuous-v3 needs Box2D, whose `box2d` 2.3.10
        # ships a wheel (gymnasium's own extra names box2d-py, which builds
        # from source with swig). Pendulum-v1 needs none of them.
        "mujoco": ["gymnasium>=1.0,<1.5", "mujoco>=3.17,<4", "imageio>=2.14",
                   "packaging", "box2d==2.3.10"],
        # MinAtar games for the agent (MinAtar/... ids, tf_vtrace.agent.envs);
        # minatar itself pulls in pandas, scipy and seaborn.
        "minatar": ["minatar>=1.0.15"],
        # Ray actors for the agent (`--backend ray`, tf_vtrace.agent.backends);
        # imported only when that backend is chosen.
        "ray": ["ray"],
        # EnvPool's C++ envs for the agent (`--vector-env envpool`,
        # tf_vtrace.agent.envs); imported only when chosen. It pulls in
        # envpool-assets (~0.7 GB of MuJoCo assets).
        "envpool": ["envpool"],
        "docs": ["mkdocs", "mkdocs-material", "mkdocstrings[python]"],
    },
    license="Apache-2.0",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
