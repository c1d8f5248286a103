"""What ds4-converge knows about the real ds4 engine: engine/knowledge/ds4.yaml, written down in this repository."""
from functools import cache
from importlib.resources import files

import yaml


@cache
def load() -> dict:
    # libyaml's parser when PyYAML has it: the pure-Python one costs every run a noticeable part of its time
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(files(__name__).joinpath("ds4.yaml").read_text(), Loader=loader)
