"""A two-stratum draw of labelling units, enriched for responses that echo a released view.

SmolLM2 uses the user's situation in about 5% of its responses, so a random draw needs thousands
of labelled units to hold :data:`~.u_validity.MIN_POSITIVES` personalisation positives. The draw
here oversamples a stratum where positives are common, defined from what the response model was
*given*, not from anything the judge reads: the judge scores (query, response) alone and never
sees the conditioning, so the stratum is not the judge being validated.

* **high** (:func:`view_echo`): a DP-MemView row (its conditioning is one released view) whose
  response repeats at least :data:`ECHO_MIN_WORDS` content words of the conditioning that are not
  in the query (:func:`echo_words`; stop words are ``sklearn``'s English list). Of the 520
  SmolLM2 store units labelled before this draw, 21 fall in it and 16 of those are
  personalisation positives, against 13 of the other 499
  (``tools/judge_labels_sample.py --stratum-check``).
* **low**: every other unit.

Each stratum is drawn uniformly without replacement (:func:`two_stratum_draw`), so every unit
carries its inclusion probability n_s / N_s, and a statistic weighted by the inverse of it
(``sample_weight`` of ``sklearn.metrics.cohen_kappa_score``) estimates the statistic over the
population the draw came from (Horvitz-Thompson weights).
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import pandas as pd

from ..core.errors import ParameterError

#: content words of the conditioning a response must repeat to fall in the high stratum
ECHO_MIN_WORDS = 6
#: the methods whose conditioning is a released view (the DP-MemView family of notebook 03)
VIEW_METHOD_PREFIX = "DP-MemView"
HIGH, LOW = "high", "low"
_WORD = re.compile(r"[a-z]+")


def _content(text: str) -> set[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return {w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in ENGLISH_STOP_WORDS}


def echo_words(query: str, response: str, conditioning: str) -> int:
    """How many content words of the conditioning's lines (its header line excluded), not in the
    query, the response repeats."""
    lines = conditioning.split("\n")[1:]
    given = set().union(*map(_content, lines)) if lines else set()
    return len((given - _content(query)) & _content(response))


def view_echo(method: str, query: str, response: str, conditioning: str,
              min_words: int = ECHO_MIN_WORDS) -> bool:
    """True for the high stratum: a released-view method whose response echoes the view."""
    return method.startswith(VIEW_METHOD_PREFIX) and echo_words(query, response, conditioning) >= min_words


def two_stratum_draw(units: pd.DataFrame, high: Sequence[bool], n_high: int, n_low: int,
                     rng: np.random.Generator) -> pd.DataFrame:
    """Draw ``n_high`` units of the high stratum and ``n_low`` of the low one, each uniformly
    without replacement (all of a stratum where it has fewer), in a seeded shuffled order.

    Returns the drawn rows with ``stratum`` ("high" / "low"), ``stratum_size`` (N_s) and
    ``inclusion_probability`` (n_s / N_s).
    """
    flags = np.asarray(high, bool)
    if len(flags) != len(units):
        raise ParameterError(f"stratum flags: {len(flags)} for {len(units)} units")
    if n_high < 0 or n_low < 0:
        raise ParameterError(f"stratum sizes must be >= 0, got high {n_high}, low {n_low}")
    parts = []
    for name, mask, n in ((HIGH, flags, n_high), (LOW, ~flags, n_low)):
        idx = np.flatnonzero(mask)
        take = min(n, len(idx))
        if take == 0:
            continue
        pick = np.sort(rng.choice(idx, size=take, replace=False))
        parts.append(units.iloc[pick].assign(stratum=name, stratum_size=len(idx),
                                             inclusion_probability=take / len(idx)))
    if not parts:
        raise ParameterError("two-stratum draw: nothing to draw")
    out = pd.concat(parts, ignore_index=True)
    return out.iloc[rng.permutation(len(out))].reset_index(drop=True)


def design_weights(inclusion_probability: Sequence[float] | np.ndarray | pd.Series) -> np.ndarray:
    """Each labelled unit's weight in fits and agreement: 1 for a unit drawn without inclusion
    probabilities (NaN); for the two-stratum draw's units 1 / inclusion probability, scaled so that
    they add up to Kish's effective sample size of those weights, (sum w)^2 / sum w^2. The draw then
    counts as a random sample from its population of the size its weights are worth: its
    oversampled stratum adds positives without counting as more units than it informs."""
    p = np.asarray(inclusion_probability, float)
    drawn = ~np.isnan(p)
    if ((p[drawn] <= 0) | (p[drawn] > 1)).any():
        raise ParameterError("inclusion probabilities must lie in (0, 1]")
    w = np.ones(len(p))
    if drawn.any():
        ht = 1 / p[drawn]
        w[drawn] = ht * np.sum(ht) / np.sum(ht ** 2)
    return w
