"""Map the repository's top-level folders onto sub-packages of one import name, ``toolgym``.

``core/`` installs as ``toolgym.core``, ``plugins/`` as ``toolgym.plugins`` and so on; nothing else
lands at the top of site-packages. Everything else is declared in pyproject.toml.
"""

from setuptools import find_packages, setup

ROOTS = ("core", "plugins", "sandboxes", "trajectories", "training")

packages = ["toolgym", *(f"toolgym.{sub}" for sub in find_packages("toolgym"))]
package_dir = {"toolgym": "toolgym"}
for root in ROOTS:
    packages.append(f"toolgym.{root}")
    packages.extend(f"toolgym.{root}.{sub}" for sub in find_packages(root))
    package_dir[f"toolgym.{root}"] = root

# Non-Python files shipped inside the packages (templates, shipped datasets, image recipes, the
# in-sandbox agent's resources), searched recursively below each package.
EXTENSIONS = (
    "json",
    "jsonl",
    "jsonl.gz",
    "json.gz",
    "jinja",
    "md",
    "txt",
    "sql",
    "html",
    "css",
    "js",
    "yaml",
    "yml",
    "toml",
    "csv",
    "sh",
    "db",
    "sqlite",
    "parquet",
    "patch",
    "diff",
    "gz",
    "cfg",
    "ini",
)
DATA = [f"**/*.{ext}" for ext in EXTENSIONS] + ["**/Dockerfile", "**/recipe*", "**/data/**/*", "py.typed"]

setup(packages=packages, package_dir=package_dir, package_data={pkg: DATA for pkg in packages})
