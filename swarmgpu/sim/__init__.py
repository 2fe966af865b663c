"""Trace-driven placement simulator (openb / FGD ATC'23 replay)."""
