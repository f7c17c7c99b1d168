"""Ship the top-level schemas/ folder inside the installed package.

The JSON schemas live at the repository's top level (editors and CI point at them there);
a non-editable install copies them to orchestrator/schemas/ so the package finds them.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithSchemas(build_py):
    def run(self):
        super().run()
        source = Path(__file__).parent / "schemas"
        target = Path(self.build_lib) / "orchestrator" / "schemas"
        target.mkdir(parents=True, exist_ok=True)
        for path in source.glob("*.json"):
            shutil.copy(path, target / path.name)


setup(cmdclass={"build_py": BuildPyWithSchemas})
