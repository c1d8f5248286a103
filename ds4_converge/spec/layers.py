"""Layer ranges of ds4's distributed mode, read as `dist_parse_layers()` in ds4_distributed.c reads them.

`A:B` is inclusive; `A:output` runs through the model's last layer and loads the output head too. How many
layers a model has comes from its GGUF (`deepseek4.block_count`); Flash has 43 (engine/knowledge/ds4.yaml).
"""
from __future__ import annotations

from dataclasses import dataclass

from ds4_converge.engine_knowledge import load as load_knowledge

UINT32_MAX = 2**32 - 1


def model_layers() -> int:
    """Layers of DeepSeek-V4-Flash, the model this tool serves."""
    return int(load_knowledge()["gguf"]["main_model"]["layers"])


@dataclass(frozen=True)
class LayerRange:
    start: int
    end: int | None  # None: through the last layer, with the output head
    text: str

    @property
    def has_output(self) -> bool:
        return self.end is None

    def last(self, layers: int) -> int:
        return layers - 1 if self.end is None else self.end


def _component(text: str) -> int | None:
    # strtoul base 10 with nothing left over; ds4 also takes a leading '+' or spaces, a spec need not
    return int(text) if text.isdigit() and len(text) < 32 and int(text) <= UINT32_MAX else None


def parse_layers(text: str) -> LayerRange:
    """The range, or ValueError worded as the engine words it."""
    start_text, colon, end_text = text.partition(":")
    if not colon or not start_text or not end_text:
        raise ValueError(f"{text!r}: expected A:B or A:output")
    if ":" in end_text:
        raise ValueError(f"{text!r}: layer range has too many ':' separators")
    start = _component(start_text)
    if start is None:
        raise ValueError(f"invalid start layer in {text}")
    if end_text == "output":
        end = None
    else:
        end = _component(end_text)
        if end is None:
            raise ValueError(f"invalid end layer in {text}")
        if end < start:
            raise ValueError(f"layer range end precedes start in {text}")
    layers = model_layers()
    if start > layers - 1:
        raise ValueError(f"{text}: layer range starts past final model layer {layers - 1}")
    if end is not None and end > layers - 1:
        raise ValueError(f"{text}: layer range ends past final model layer {layers - 1}")
    return LayerRange(start, end, text)
