"""Where the model files the engine loads lie: the models role finds them, the service role puts them on the
engine's command line."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelPaths:
    main: Path
    mtp: Path | None = None
    dspark: Path | None = None
