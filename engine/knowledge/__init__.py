"""What ds4-converge knows about the real ds4 engine: engine/knowledge/ds4.yaml, written down in this repository."""
from functools import cache
from importlib.resources import files

import yaml


@cache
def load() -> dict:
    return yaml.safe_load(files(__name__).joinpath("ds4.yaml").read_text())
