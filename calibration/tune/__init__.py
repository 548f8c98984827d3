"""`judge tune`: better versions of the judge from the human labels, accepted only with an honest held-out gain
(tune.py: the verb; gain.py: the statistics core; build.py: the candidate builders; runs.py: judging them through
the engine; cli.py: the parser)."""

import sys
import types


class _CallableFamily(types.ModuleType):
    """`calibration.tune(...)` is the verb, as `calibration.select(...)` is: the family's package shares the verb's
    name, so the package itself calls calibration.tune.tune.tune."""

    def __call__(self, *args, **kwargs):
        from calibration import _keywords_checked  # an unknown keyword: the project's error, as for every verb

        from .tune import tune

        return _keywords_checked(tune)(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableFamily
