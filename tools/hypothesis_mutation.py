"""A pytest plugin for mutation runs (``-p hypothesis_mutation``, tools/mutation.py): Hypothesis
without its shrink phase, on a fixed seed.

A mutant a property test catches then fails as soon as the first failing example is found, instead
of spending most of its run shrinking that example; the seed makes two runs of one mutant agree.
"""

from hypothesis import Phase, settings

settings.register_profile("mutation", phases=[Phase.explicit, Phase.reuse, Phase.generate], derandomize=True)
settings.load_profile("mutation")
