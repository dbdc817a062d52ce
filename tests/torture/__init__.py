"""Crash torture: a child runs a mixed workload and is SIGKILLed at a random instant;
the parent recovers the home, runs everything to completion and checks that nothing
acknowledged was lost and no recorded step ran twice. `python -m tests.torture`."""
