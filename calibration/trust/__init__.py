"""Can the judge be trusted without humans? `audit` (length, position and self-preference effects, probes, each
against the humans' own effect and the judge's re-run noise), `drift` (is it still the same judge?) and `select`
(which judge, prompt or jury agrees best with humans)."""
