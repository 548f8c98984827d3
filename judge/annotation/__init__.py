"""Human annotation round trip: `judge export` writes sheets in the guideline's layout, `judge import` reads the
filled sheets back as the long labels CSV (`item_id,system,annotator,criterion,score`).

Tokens written to the labels CSV's `score` column:

- a Likert point as an integer (`4`); a per-segment criterion gets the mean over the candidate's segments
  (`1.5`), and the segments' own answers, in order, in the `segment_scores` column (`2;1`);
- a categorical label as its text (`appropriate`), abstentions included (`I don't know`): never a number;
- a pairwise verdict as `1`, `2` or `0` (tie), in the input's order of the pair (the sheet's order is undone);
- `N/A` when the annotator said a gated criterion does not apply (e.g. a call without sub-issues).

The chosen explanation, when the criterion has a list, goes in the `explanation` column (`other: ...` for free text).
"""

import os

NA = "N/A"
OTHER = "other"
LABEL_COLUMNS = ["item_id", "system", "annotator", "criterion", "score", "explanation", "segment_scores"]


def default_mode(base: int) -> int:
    """The permissions a plain open() or mkdir() would give (base 0o666 or 0o777 less the umask): files made
    through tempfile start private, and a package is meant to be shared."""
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask
