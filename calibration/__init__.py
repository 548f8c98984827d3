"""Judge-versus-human calibration: agreement, correlation, calibration maps and reports."""
