"""The engine's vocabulary, typed: what a run is (`model.run`).

A leaf package: it imports nothing of `engine/`, `journal/` or `control/`
(`tests/unit/test_architecture.py`), so every room of the engine, the stores and
the control surface can speak it.
"""
