"""What the real-serving tests share: the phantom's prompt and word, the disk KV cache settings."""
from __future__ import annotations

import sys

from boxes import REPO

sys.path.insert(0, str(REPO / "engine" / "models"))
import make_phantom_gguf as phantom_gguf  # noqa: E402

PROMPT = "Hi"  # 5 tokens with the chat template (BOS, User, Hi, Assistant, </think>)
WORD = phantom_gguf.ANSWER.strip()
# the disk KV cache settings that make the 5-token prompt a hit, also after a restart (real-engines.md measured it)
KV_CACHE_ARGS = ["--kv-cache-min-tokens", "4", "--kv-cache-boundary-align-tokens", "0",
                 "--kv-cache-boundary-trim-tokens", "0"]
