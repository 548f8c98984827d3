"""The human-study loop's statistics: `screen` (what the judge already says, a plan under a budget, power) and
`estimate` (each system's human-scale mean from all judgments plus the random-sample labels, PPI++)."""
