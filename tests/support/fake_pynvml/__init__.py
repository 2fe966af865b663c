"""A fake ``pynvml`` for tests, fed from real captures in tests/fixtures.

``pynvml.py`` mimics nvidia-ml-py's names, constants and exceptions over a
``FakeMachine``; ``builder.py`` parses real ``nvidia-smi`` output into one.
"""
