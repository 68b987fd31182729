"""What of a bot's turn was spoken, in tokens: the bridge between a voice pipeline's text and
streamd's Truncate(request_id, keep_tokens). No framework imports (streamd_client.pipecat uses it).

A turn's ledger records each TokenDelta as it arrives — how many tokens, and the text they
complete — so the generated text is cut into spans at delta boundaries:

    tokens  [t0][t1 t2][t3][t4]          bounds (tokens, chars): (0,0) (1,5) (3,11) (4,12) ...
    text    "Hello"" there"","" friend"

Spoken text (a TTS's words, or the text frames that passed the output) is matched against the
generated text character by character, whitespace ignored on both sides, to find where it ends
in the generated text; cut() keeps the tokens of the longest span prefix that ends
there or before. Invariants: cut() never keeps a token whose text was not spoken (a
delta holding several tokens counts as one span, so the cut may fall short of the spoken end,
never past it), and a delta with empty text (an incomplete character) is kept only with the
text that completes it.
"""
from __future__ import annotations

from typing import List, Tuple


def spoken_end(generated: str, spoken: str) -> int:
    """The offset in `generated` just past the last character of `spoken`, matching
    non-whitespace characters in order. A mismatch (a TTS that rewrote the text, e.g. "5" as
    "five") stops the match there: what follows is not known to have been spoken."""
    i = 0
    end = 0
    n = len(generated)
    for c in spoken:
        if c.isspace():
            continue
        while i < n and generated[i].isspace():
            i += 1
        if i >= n or generated[i] != c:
            break
        i += 1
        end = i
    return end


class TurnLedger:
    """One generation of a bot turn: its deltas, and the spoken text reported so far."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self._bounds: List[Tuple[int, int]] = [(0, 0)]  # (tokens, chars) after each delta
        self._text: List[str] = []
        self._spoken: List[str] = []

    def add_delta(self, n_tokens: int, text: str) -> None:
        tokens, chars = self._bounds[-1]
        self._bounds.append((tokens + n_tokens, chars + len(text)))
        self._text.append(text)

    def add_spoken(self, text: str) -> None:
        self._spoken.append(text)

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def spoken_text(self) -> str:
        return "".join(self._spoken)

    @property
    def generated_tokens(self) -> int:
        return self._bounds[-1][0]

    def cut(self) -> Tuple[int, str]:
        """(keep_tokens, text): the tokens of the generation whose text was all spoken (see the
        module comment), and that text, which is what the context holds after the truncation."""
        end = spoken_end(self.text, self.spoken_text)
        best_chars = max(c for _, c in self._bounds if c <= end)
        keep = min(t for t, c in self._bounds if c == best_chars)
        return keep, self.text[:best_chars]
