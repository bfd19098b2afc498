"""Typed configs (schema.py) and the cross-group rules that check them (validate.py)."""
